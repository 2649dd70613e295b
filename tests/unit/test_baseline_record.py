"""The baseline record: a median reference that needs `min_count` values, keeps the last `keep`,
survives a restart through its file, and starts empty (saying why) from a file it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_kernels.config import RewardConfig
from rl_kernels.evaluation.baseline_record import BaselineRecord


def test_no_reference_until_min_count_then_the_median(tmp_path: Path) -> None:
    record = BaselineRecord.load(tmp_path / "r.json", keep=5, min_count=3)
    assert record.reference("eager") is None and record.drift("eager", 1.0) is None
    record.add({"eager": 5.0})
    record.add({"eager": 13.0})     # one odd baseline job (measured while a model loaded beside it)
    assert record.reference("eager") is None
    record.add({"eager": 5.5})
    assert record.reference("eager") == 5.5     # the odd one is outvoted
    assert record.drift("eager", 11.0) == pytest.approx(2.0)
    assert record.drift("eager", 2.75) == pytest.approx(2.0)   # either way
    assert record.drift("compile", 5.5) is None                # another baseline has its own record


def test_keeps_the_last_values_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "baselines" / "x.record.json"
    record = BaselineRecord.load(path, keep=3, min_count=1)
    for v in (1.0, 2.0, 3.0, 4.0):
        record.add({"eager": v, "compile": 10 * v})
    assert record.ms == {"eager": [2.0, 3.0, 4.0], "compile": [20.0, 30.0, 40.0]}
    again = BaselineRecord.load(path, keep=2, min_count=1)     # a smaller keep trims what it reads
    assert again.ms == {"eager": [3.0, 4.0], "compile": [30.0, 40.0]} and again.problem == ""
    assert not list(path.parent.glob("*.tmp"))


def test_values_that_are_not_times_are_not_kept(tmp_path: Path) -> None:
    record = BaselineRecord.load(tmp_path / "r.json", keep=4, min_count=1)
    record.add({"eager": 0.0, "compile": -1.0})
    assert record.ms == {}
    assert record.drift("eager", 0.0) is None


@pytest.mark.parametrize("text", ["{not json", json.dumps({"ms": {"eager": ["a"]}}), json.dumps([1, 2]),
                                  json.dumps({"other": 1})])
def test_an_unreadable_file_starts_an_empty_record_and_says_why(tmp_path: Path, text: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    record = BaselineRecord.load(path, keep=3, min_count=1)
    assert record.ms == {} and str(path) in record.problem and "unreadable baseline record" in record.problem
    record.add({"eager": 2.0})                                  # and the next trusted value replaces the file
    assert json.loads(path.read_text()) == {"ms": {"eager": [2.0]}}


@pytest.mark.parametrize("keep,min_count", [(0, 1), (3, 0), (3, 4)])
def test_a_record_that_could_never_check_is_refused(tmp_path: Path, keep: int, min_count: int) -> None:
    with pytest.raises(ValueError, match="keep >= 1 and 1 <= min_count <= keep"):
        BaselineRecord(tmp_path / "r.json", keep, min_count)


def test_config_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="baseline_record_min .* must not exceed"):
        RewardConfig(baseline_record_keep=2, baseline_record_min=3)
    with pytest.raises(ValueError, match="baseline_drift factors must be above 1"):
        RewardConfig(baseline_drift={"cpu": 0.5})
