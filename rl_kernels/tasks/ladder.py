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

import copy
from dataclasses import dataclass
from typing import Any

from rl_kernels.tasks.module import TaskError, load_task_program
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


@dataclass(frozen=True)
class RungCheck:
    comparison: Any   # correctness.Comparison against the float64 reference, every input set
    candidate: Any    # the rung's ModelNew on the device, ready to time
    reference: Any    # the task's Model with the same weights, float32 on the device (the eager baseline)


def check_rung(rung: Rung, device: str) -> RungCheck:
    """Runs the rung file (load_inline builds or reuses its extension), then compares it with the task's
    Model in float64 on the main and every variant input set, under the evaluator's float32 bounds.

    No sandbox and no gates: this is how tests and `benchmarks/ladder.py` check our own rungs; kernels
    from anywhere else go through the evaluator."""
    import torch

    from rl_kernels.config import CorrectnessConfig
    from rl_kernels.evaluation.correctness import (Comparison, as_output_list, check_structure, compare_values,
                                                   dtype_tolerance)

    namespace: dict[str, Any] = {}
    exec(compile(rung.source, rung.origin, "exec"), namespace)
    program = load_task_program(rung.task)
    init = program.get_init_inputs()
    torch.manual_seed(0)
    reference = program.model_cls(*init)
    torch.manual_seed(0)
    candidate = namespace["ModelNew"](*init).to(device)
    ref64 = copy.deepcopy(reference).double()
    tol = dtype_tolerance(CorrectnessConfig(), "float32")
    verdict = Comparison(None)
    with torch.no_grad():
        for inputs in [program.get_inputs(), *program.get_variant_inputs()]:
            outs = as_output_list(candidate(*[x.to(device) for x in inputs]))
            got = [o.cpu() if isinstance(o, torch.Tensor) else o for o in outs]
            expected = as_output_list(ref64(*[x.double() for x in inputs]))
            # The evaluator's structure check against the float32 outputs the task's Model returns,
            # then its value bounds against the float64 ones.
            verdict = check_structure(got, [e.float() for e in expected])
            if verdict.ok:
                verdict = compare_values(got, expected, tol)
            if not verdict.ok:
                break
    return RungCheck(verdict, candidate, reference.to(device))
