"""benchmarks/learning_table.py's trend: the within-task pooling that keeps a change of task mix from
reading as faster kernels."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

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
