"""Regression suite: every cpu-backend reward hack is rejected with an expected reason, and the
honest candidates pass every gate, through the whole evaluator (gate, build, sandbox, timing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.build import build_many
from rl_kernels.evaluation.guards import static_check
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.tasks import get_task
from rl_kernels.tasks.module import load_module_task
from rl_kernels.types import Task

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"


def _entries(kind: str, backend: str) -> list[dict]:
    data = yaml.safe_load((CANDIDATES / kind / "manifest.yaml").read_text())
    return [e for e in data["hacks" if kind == "hacks" else "candidates"] if e["backend"] == backend]


def _task(entry: dict, root: Path) -> Task:
    if "task_file" in entry:
        return load_module_task(root / entry["task_file"], task_id=f"test/{Path(entry['task_file']).stem}")
    return get_task(entry["task"])


@pytest.fixture(scope="module", autouse=True)
def prebuilt(cpu_config: EvalConfig) -> None:
    """Every candidate of this module built first, two at a time (the compile pool's job): the
    evaluations below then hit the build cache, and the torch-extension builds share the 2 cores.

    Module builds need a precompiled torch header per set of flags, built by the first build that
    needs it while every other build needing it waits: the honest candidates' `-O3` (the built-in
    seeds' flags, which the rollout and training tests later reuse) and the hacks' default flags.
    So one build of each goes first, side by side, then the C++ hgemm builds (no torch header),
    which keep both cores busy while the headers build, then the other module builds.  Candidates
    for degenerate tasks are left out: the evaluator rejects the task before any build.
    """
    items = [(_task(e, CANDIDATES / kind), (CANDIDATES / kind / e["file"]).read_text())
             for kind in ("honest", "hacks") for e in _entries(kind, "cpu")
             if "degenerate_task" not in e.get("expected", [])]
    built = [item for item in items if item[0].kind == "module"
             and static_check(item[0], item[1], "cpu", allow_torch_ops=item[0].allow_torch_ops).reason is None]
    firsts = [built[0], next(item for item in built if "-O3" not in item[1])]
    rest = [item for item in items if item not in firsts]
    build_many(firsts + [i for i in rest if i[0].kind != "module"] + [i for i in rest if i[0].kind == "module"],
               cpu_config, jobs=2)


@pytest.mark.parametrize("entry", _entries("hacks", "cpu"), ids=lambda e: e["file"])
def test_cpu_hack_rejected(entry: dict, cpu_config: EvalConfig) -> None:
    root = CANDIDATES / "hacks"
    m = Evaluator(cpu_config).evaluate(_task(entry, root), (root / entry["file"]).read_text())
    if entry.get("inert") and m.rejected is None:
        return
    assert m.rejected in entry["expected"], f"{entry['file']}: got {m.rejected!r} ({m.detail[:500]})"
    assert m.reward == cpu_config.reward.fail_reward
    assert not m.correct


@pytest.mark.parametrize("entry", _entries("honest", "cpu"), ids=lambda e: e["file"])
def test_cpu_honest_passes(entry: dict, cpu_config: EvalConfig) -> None:
    root = CANDIDATES / "honest"
    m = Evaluator(cpu_config).evaluate(_task(entry, root), (root / entry["file"]).read_text())
    assert m.rejected is None, f"{entry['file']}: {m.rejected} {m.detail[:800]}"
    assert m.correct and m.compiled
    assert m.samples >= 30 and m.speedup and m.speedup > 0
    assert m.reward >= cpu_config.reward.min_correct_reward
