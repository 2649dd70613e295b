"""benchmarks/learning_table.py's trend: the within-task pooling that keeps a change of task mix from
reading as faster kernels, and the gate that keeps an unbelieved speed out of it."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path

import pytest

from rl_kernels.trajectories import Trajectory
from rl_kernels.types import Measurement

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "learning_table.py"
_SPEC = importlib.util.spec_from_file_location("learning_table", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
learning_table = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(learning_table)


def test_a_line_gives_its_slope_with_no_error() -> None:
    b, se = learning_table.slope([(v, 0.5 + 0.02 * v) for v in range(10)])
    assert b == pytest.approx(0.02) and se == pytest.approx(0.0, abs=1e-12)


def test_too_few_points_or_one_version_give_no_slope() -> None:
    assert learning_table.slope([(0, 1.0), (1, 2.0)]) is None
    assert learning_table.slope([(3, 1.0), (3, 2.0), (3, 0.5)]) is None


def test_a_later_mix_of_the_faster_task_is_no_rise_within_tasks() -> None:
    """Two flat tasks, the fast one sampled mostly late: pooled raw the points rise, within tasks
    they do not."""
    slow = [(v, -1.0 + (0.01 if v % 2 else -0.01)) for v in (0, 1, 2, 3, 4, 5, 6, 7)]
    fast = [(v, 0.5 + (0.01 if v % 2 else -0.01)) for v in (6, 7, 8, 9, 10, 11, 12, 13)]
    raw, _ = learning_table.slope(slow + fast)
    assert raw > 0.1
    fits = {name: fit for name, _, fit in learning_table.trend({"t/slow": slow, "t/fast": fast})}
    pooled, se = fits["pooled within tasks"]
    assert abs(pooled) < 0.01 and se > 0
    assert abs(fits["t/slow"][0]) < 0.01 and abs(fits["t/fast"][0]) < 0.01


def _trajectory(**measured: object) -> Trajectory:
    """A completion whose 2x kernel passed every gate, with `measured` fields changed."""
    m = Measurement(task="t", backend="cpu", mode="module", compiled=True, correct=True, speedup=2.0)
    return Trajectory(index=0, completion="", source="", reward=1.0, measurement=dataclasses.replace(m, **measured))


def test_only_a_believed_speed_counts_as_a_kernel() -> None:
    """An unsettled, drifted or flagged speed is in no summary: a slow kernel that makes its own
    timing erratic would otherwise read as a rise."""
    assert learning_table.ln_speedup(_trajectory()) == pytest.approx(math.log(2.0))
    for untrusted in ({"extra": {"unstable_measurement": {"candidate_spread": 2.0}}},
                      {"extra": {"baseline_drift": {"reference_ms": 1.0}}}, {"flagged": "above the ceiling"},
                      {"correct": False}):
        t = _trajectory(**untrusted)
        assert learning_table.ln_speedup(t) is None, untrusted
    assert learning_table.outcome(_trajectory(extra={"unstable_measurement": True})) == "2.00x flagged"
