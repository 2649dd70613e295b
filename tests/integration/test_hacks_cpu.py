"""Regression suite: every cpu-backend reward hack is rejected with an expected reason, and the
honest candidates pass every gate, through the whole evaluator (gate, build, sandbox, timing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.build import build_many
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

    The honest candidates go first: their `-O3` (the built-in seeds' flags) needs a precompiled
    torch header of its own, which then builds beside the hacks' one instead of after it, and the
    rollout and training tests later reuse it.  Candidates for degenerate tasks
    are left out: the evaluator rejects the task before any build.
    """
    items = [(_task(e, CANDIDATES / kind), (CANDIDATES / kind / e["file"]).read_text())
             for kind in ("honest", "hacks") for e in _entries(kind, "cpu")
             if "degenerate_task" not in e.get("expected", [])]
    build_many(items, cpu_config, jobs=2)


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
