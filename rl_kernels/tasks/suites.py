"""Task suites: the built-in module suite, the hgemm suites, and any folder of KernelBench files.

A suite is just a list of Tasks.  Names resolve as:
  * "builtin"                        -> our module tasks shipped in `tasks/builtin/` (suite.yaml)
  * "hgemm", "hgemm/fp16", ...       -> `rl_kernels.tasks.hgemm.hgemm_suite`
  * a directory                      -> every KernelBench-format file below it (e.g. a KernelBench
                                        checkout: `KernelBench/level1/1_Square_matrix_multiplication_.py`)
Files in a directory that are not tasks are skipped and reported (logged), never silently dropped.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from pathlib import Path

import yaml

from rl_kernels.tasks.module import TaskError, load_module_task
from rl_kernels.types import Task

log = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).parent / "builtin"
SEED_BACKENDS = ("cpu", "cuda")
HGEMM_SUITES = {"hgemm": ("fp16", "fp32"), "hgemm/fp16": ("fp16",), "hgemm/fp32": ("fp32",)}


@dataclass(frozen=True)
class SkippedFile:
    """A .py file under a suite directory that is not a usable task, and why."""

    path: Path
    reason: str


def list_suites() -> list[str]:
    """Named suites (any directory of KernelBench files is a suite too)."""
    return ["builtin", *HGEMM_SUITES]


MANIFEST_PATH = BUILTIN_DIR / "suite.yaml"


def _manifest_tasks(data: dict) -> dict[str, str]:
    tasks = data.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise TaskError(f"{MANIFEST_PATH}: expected a non-empty `tasks:` mapping of name -> description")
    return {str(name): str(desc) for name, desc in tasks.items()}


def builtin_manifest() -> dict[str, str]:
    """name -> one-line description, in suite order, from builtin/suite.yaml."""
    return _manifest_tasks(yaml.safe_load(MANIFEST_PATH.read_text()) or {})


def builtin_heldout() -> list[str]:
    """The built-in tasks held out of training (suite.yaml's `heldout:` names; see tasks/split.py)."""
    data = yaml.safe_load(MANIFEST_PATH.read_text()) or {}
    known = _manifest_tasks(data)
    names = [str(n) for n in data.get("heldout") or []]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise TaskError(f"{MANIFEST_PATH}: `heldout:` names tasks that are not in `tasks:`: {unknown}")
    return names


def _builtin_task(name: str, description: str) -> Task:
    seeds = {}
    for backend in SEED_BACKENDS:
        seed_path = BUILTIN_DIR / "seeds" / backend / f"{name}.py"
        if not seed_path.is_file():
            raise TaskError(f"built-in task {name}: seed file {seed_path} is missing")
        seeds[backend] = seed_path.read_text()
    return load_module_task(BUILTIN_DIR / "tasks" / f"{name}.py", f"builtin/{name}", description, seeds)


def load_builtin_suite() -> list[Task]:
    return [_builtin_task(name, desc) for name, desc in builtin_manifest().items()]


def _suite_root(root: Path) -> Path:
    """A KernelBench repository clone keeps its tasks in `<clone>/KernelBench/level*/`; use that."""
    inner = root / "KernelBench"
    if inner.is_dir() and any(p.is_dir() and p.name.startswith("level") for p in inner.iterdir()):
        return inner
    return root


def scan_task_dir(root: Path) -> tuple[list[Task], list[SkippedFile]]:
    """Every task file below `root` (ids `<root name>/<relative path without .py>`) and the rest."""
    root = _suite_root(Path(root))
    if not root.is_dir():
        raise TaskError(f"suite directory {root} does not exist")
    tasks: list[Task] = []
    skipped: list[SkippedFile] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if path.name == "__init__.py" or any(part.startswith((".", "__")) for part in rel.parts[:-1]):
            continue
        task_id = f"{root.name}/{rel.with_suffix('').as_posix()}"
        try:
            tasks.append(load_module_task(path, task_id))
        except TaskError as exc:
            skipped.append(SkippedFile(path, str(exc)))
    return tasks, skipped


def load_suite(name_or_path: str) -> list[Task]:
    """Resolve a suite name or directory to its tasks (see the module docstring)."""
    if name_or_path == "builtin":
        return load_builtin_suite()
    if name_or_path in HGEMM_SUITES:
        from rl_kernels.tasks.hgemm import hgemm_suite  # deferred: owned by the hgemm module

        return hgemm_suite(accumulators=HGEMM_SUITES[name_or_path])
    path = Path(name_or_path)
    if not path.is_dir():
        raise TaskError(f"unknown suite {name_or_path!r}: not one of {list_suites()} and not a directory")
    tasks, skipped = scan_task_dir(path)
    if skipped:
        lines = "\n".join(f"  {s.path}: {s.reason}" for s in skipped)
        log.warning("suite %s: skipped %d file(s) that are not tasks:\n%s", path, len(skipped), lines)
    if not tasks:
        raise TaskError(f"suite directory {path} holds no KernelBench-format task files")
    return tasks


def get_task(ref: str) -> Task:
    """One task by id (`builtin/<name>`, `hgemm/<acc>/<M>_<N>_<K>`) or by path to a .py task file."""
    if ref.endswith(".py") or Path(ref).is_file():
        return load_module_task(Path(ref))
    if ref.startswith("hgemm/"):
        from rl_kernels.tasks.hgemm import hgemm_task  # deferred: owned by the hgemm module

        return hgemm_task(ref)
    manifest = builtin_manifest()
    name = ref.removeprefix("builtin/")
    if ref.startswith("builtin/") and name in manifest:
        return _builtin_task(name, manifest[name])
    known = [f"builtin/{n}" for n in manifest]
    close = difflib.get_close_matches(ref, known, n=3, cutoff=0.6)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    raise TaskError(f"unknown task {ref!r}: ids look like builtin/<name>, hgemm/<acc>/<M>_<N>_<K> "
                    f"or a path to a .py task file{hint}")
