"""The built-in solution ladder: several verified solutions per built-in task and backend.

A ladder shows a model (and a reader) what makes a kernel faster on one task: the plain seed, then
rungs that change one idea at a time (coalescing, vectorising, tiling, threads, fusion).  It is the
warm start's built-in data (`sft.sources: [{kind: builtin}]`) and its measured speed order is a table
in docs/LEARNING.md (`benchmarks/ladder.py`), never an assertion of timings.

Layout, per backend and task, under `tasks/builtin/ladder/<backend>/<task>/`:
  seed.md              the analysis of the task's seed (`seeds/<backend>/<task>.py`)
  <slug>.py, <slug>.md  one more rung and its analysis; the slug names the technique
An analysis has the answer's prose sections (`### Performance analysis`, `### Algorithm design`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_kernels.tasks.module import TaskError
from rl_kernels.tasks.suites import BUILTIN_DIR, SEED_BACKENDS, load_builtin_suite
from rl_kernels.types import Task

LADDER_DIR = BUILTIN_DIR / "ladder"
SEED_RUNG = "seed"
# A ladder shorter than this is a packaging error, not a choice: the warm start and the speed
# table both expect several solutions of different speed per task.
MIN_RUNGS = 3


@dataclass(frozen=True)
class Rung:
    task: Task
    backend: str
    name: str        # "seed" or the rung's slug
    source: str      # the candidate file, as the evaluator takes it
    analysis: str    # its "### Performance analysis" / "### Algorithm design" text

    @property
    def origin(self) -> str:
        return f"builtin ladder {self.backend}/{self.task.id.split('/', 1)[1]}/{self.name}"


def _task_rungs(task: Task, backend: str) -> list[Rung]:
    name = task.id.split("/", 1)[1]
    folder = LADDER_DIR / backend / name
    seed_md = folder / f"{SEED_RUNG}.md"
    if not seed_md.is_file():
        raise TaskError(f"built-in ladder {backend}/{name}: {seed_md} (the seed's analysis) is missing")
    rungs = [Rung(task, backend, SEED_RUNG, task.seeds[backend], seed_md.read_text())]
    for code in sorted(folder.glob("*.py")):
        md = code.with_suffix(".md")
        if not md.is_file():
            raise TaskError(f"built-in ladder {backend}/{name}: {code.name} has no analysis {md.name}")
        rungs.append(Rung(task, backend, code.stem, code.read_text(), md.read_text()))
    if len(rungs) < MIN_RUNGS:
        raise TaskError(f"built-in ladder {backend}/{name}: {len(rungs)} rungs, expected at least {MIN_RUNGS}")
    return rungs


def load_ladder(backend: str, tasks: list[Task] | None = None) -> list[Rung]:
    """Every rung of the given built-in tasks (default: the whole suite) for one backend, seed first."""
    if backend not in SEED_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: the built-in ladder has {', '.join(SEED_BACKENDS)}")
    chosen = load_builtin_suite() if tasks is None else tasks
    not_builtin = [t.id for t in chosen if not t.id.startswith("builtin/")]
    if not_builtin:
        raise ValueError(f"the ladder covers built-in tasks only, not {not_builtin}")
    return [rung for task in chosen for rung in _task_rungs(task, backend)]
