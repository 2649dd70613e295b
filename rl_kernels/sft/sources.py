"""Where supervised warm-start data comes from: kernels other people (or earlier runs) wrote.

Each reader turns one source into `SftItem`s (a task, a candidate source, optional analysis text)
and says what it could not use and why, per item, instead of failing the whole file: a corpus of a
thousand kernels with three broken lines is still a corpus.  Nothing here is trusted: every item
is re-verified by the evaluator before it is trained on (`verify.py`).

Sources:
- a JSONL file of `{"task": ID, "source": CODE[, "analysis": TEXT]}` (ID as `get_task` takes it);
- a directory of CUDA-L2-style hgemm kernels named `M_N_K.cu` (one accumulator per directory);
- CUDA-L1's released results (`optimized_cuda_code/*.json`: one JSON object per line pairing a
  KernelBench reference `ref_code` with its optimized `custom_code`, which may be null);
- the archive of an earlier run (`archive.sqlite`: the kernels that passed every gate);
- the built-in ladder (`tasks/ladder.py`: several solutions with analyses per built-in task).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rl_kernels.tasks import TaskError, get_task
from rl_kernels.tasks.module import parse_module_task
from rl_kernels.types import Task

SourceKind = Literal["jsonl", "cuda_l2", "cuda_l1", "archive", "builtin"]
# Why an item of a source was not used (before verification).
SkipReason = Literal["malformed", "unknown_task", "no_code", "not_a_kernel_name", "heldout_task",
                     "not_selected"]
_HGEMM_FILE = re.compile(r"^(\d+)_(\d+)_(\d+)\.cu$")


@dataclass(frozen=True)
class SftItem:
    task: Task
    source: str      # the candidate, exactly as the evaluator takes it
    analysis: str    # the answer's prose ("Performance analysis" / "Algorithm design"); may be empty
    origin: str      # where it came from (file:line, file name, archive row), for reports


@dataclass(frozen=True)
class Skipped:
    origin: str
    reason: str      # a SkipReason when reading, the evaluator's reason code when verifying
    detail: str


@dataclass
class Loaded:
    items: list[SftItem] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def extend(self, other: Loaded) -> None:
        self.items += other.items
        self.skipped += other.skipped


def read_jsonl(path: Path) -> Loaded:
    """`{"task", "source"[, "analysis"]}` per line; blank lines ignored."""
    out = Loaded()
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            out.skipped.append(Skipped(where, "malformed", f"not JSON: {exc.msg} at column {exc.colno}"))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("task"), str) or not isinstance(row.get("source"), str):
            out.skipped.append(Skipped(where, "malformed", 'expected an object with string fields "task" and "source"'))
            continue
        if not row["source"].strip():
            out.skipped.append(Skipped(where, "no_code", "empty source"))
            continue
        try:
            task = get_task(row["task"])
        except ValueError as exc:   # TaskError, or an hgemm id with a bad part
            out.skipped.append(Skipped(where, "unknown_task", str(exc)))
            continue
        analysis = row.get("analysis", "")
        out.items.append(SftItem(task, row["source"], analysis if isinstance(analysis, str) else "", where))
    return out


def read_cuda_l2_dir(path: Path, accumulator: Literal["fp16", "fp32"]) -> Loaded:
    """Every `M_N_K.cu` of a directory as the hgemm task of that shape and accumulator."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"CUDA-L2 kernel directory {root} does not exist")
    out = Loaded()
    for file in sorted(root.iterdir()):
        if not file.is_file():
            continue
        m = _HGEMM_FILE.match(file.name)
        if m is None:
            out.skipped.append(Skipped(str(file), "not_a_kernel_name", "expected M_N_K.cu"))
            continue
        task_id = f"hgemm/{accumulator}/{m.group(1)}_{m.group(2)}_{m.group(3)}"
        try:
            task = get_task(task_id)
        except ValueError as exc:
            out.skipped.append(Skipped(str(file), "unknown_task", str(exc)))
            continue
        out.items.append(SftItem(task, file.read_text(), "", str(file)))
    return out


def read_cuda_l1(path: Path) -> Loaded:
    """CUDA-L1's released results: the task is the KernelBench reference carried in each record
    (id `kernelbench/L{level}/{task}`), the candidate its `custom_code`."""
    out = Loaded()
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            out.skipped.append(Skipped(where, "malformed", f"not JSON: {exc.msg} at column {exc.colno}"))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("ref_code"), str):
            out.skipped.append(Skipped(where, "malformed", 'expected an object with a string "ref_code"'))
            continue
        code = row.get("custom_code")
        if not isinstance(code, str) or not code.strip():
            out.skipped.append(Skipped(where, "no_code", "no optimized code released for this task"))
            continue
        task_id = f"kernelbench/L{row.get('level_id', '?')}/{row.get('task_id', number)}"
        try:
            task = parse_module_task(row["ref_code"], task_id, where)
        except TaskError as exc:
            out.skipped.append(Skipped(where, "unknown_task", str(exc)))
            continue
        out.items.append(SftItem(task, code, "", where))
    return out


def read_archive(path: Path, backend: str) -> Loaded:
    """The verified kernels of an earlier run's archive, for one backend."""
    from rl_kernels.archive import KernelArchive

    if not Path(path).is_file():
        raise FileNotFoundError(f"archive {path} does not exist")
    out = Loaded()
    with KernelArchive(Path(path)) as archive:
        for task_id in archive.tasks():
            for kernel in archive.kernels(task_id, backend):
                where = f"{path}:{task_id}:{kernel.sha256[:12]}"
                try:
                    task = get_task(task_id)
                except ValueError as exc:
                    out.skipped.append(Skipped(where, "unknown_task", str(exc)))
                    continue
                out.items.append(SftItem(task, kernel.source, "", where))
    return out


def read_builtin(backend: str) -> Loaded:
    """The built-in ladder's rungs for one backend, each with its analysis."""
    from rl_kernels.tasks.ladder import load_ladder

    return Loaded(items=[SftItem(r.task, r.source, r.analysis, r.origin) for r in load_ladder(backend)])


def read_source(kind: SourceKind, path: Path | None, *, backend: str = "cpu",
                accumulator: Literal["fp16", "fp32"] = "fp32") -> Loaded:
    """One configured data source, by kind (`builtin` has no path: the ladder ships with the package)."""
    if kind == "builtin":
        return read_builtin(backend)
    if path is None:
        raise ValueError(f"SFT source kind {kind!r} needs a path")
    if kind == "jsonl":
        return read_jsonl(path)
    if kind == "cuda_l2":
        return read_cuda_l2_dir(path, accumulator)
    if kind == "cuda_l1":
        return read_cuda_l1(path)
    if kind == "archive":
        return read_archive(path, backend)
    raise ValueError(f"unknown SFT source kind {kind!r}: one of jsonl, cuda_l2, cuda_l1, archive, builtin")
