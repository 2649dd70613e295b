"""The metrics sink (metrics.jsonl and a real offline W&B run) and the rollout metrics of scored groups.

No test here may touch the network: W&B runs offline with its own telemetry off, and the online
case is only checked up to the missing-credentials error, which is raised before wandb starts.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Iterator

import pytest

from rl_kernels.config import MetricsConfig
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.metrics import (FILENAME, HACK_REASONS, RUN_ID_FILE, MetricsSink, WandbLoginError,
                                _has_wandb_credentials, group_metrics, read_metrics)
from rl_kernels.trajectories import CorruptTrajectoryFile, Group, Trajectory
from rl_kernels.types import Measurement

NO_WANDB = MetricsConfig(wandb=False)
OFFLINE = MetricsConfig(wandb=True, wandb_mode="offline", wandb_project="test-project")


@pytest.fixture(scope="module", autouse=True)
def _wandb_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Quiet, offline, and nothing written to the user's ~/.config/wandb or ~/.cache/wandb."""
    home = tmp_path_factory.mktemp("wandb_home")
    with pytest.MonkeyPatch.context() as mp:
        for var, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false",
                           "WANDB_CONFIG_DIR": str(home / "config"), "WANDB_CACHE_DIR": str(home / "cache"),
                           "WANDB_DATA_DIR": str(home / "data")}.items():
            mp.setenv(var, value)
        yield


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One offline W&B run shared by the tests that inspect it (wandb.init takes ~0.5 s)."""
    run_dir = tmp_path_factory.mktemp("offline_run")
    with MetricsSink(run_dir, OFFLINE, run_config={"lr": 1e-5, "nested": {"g": 8}}, name="unit") as sink:
        sink.log({"learner/loss": 0.5, "learner/ok": True, "note": "warm-up", "gone": None}, step=0)
        sink.log({"learner/loss": float("nan"), "rollout/speedup_max": math.inf}, step=3)
        sink.log({"late/gauge": 7}, step=1)   # smaller step than before: must not be dropped
    return run_dir


def _offline_runs(run_dir: Path) -> list[Path]:
    """The offline W&B run folders of a sink's run: offline-run-<time>-<id>, "-1" appended when a
    resumed run starts within the same second."""
    run_id = (run_dir / RUN_ID_FILE).read_text().strip()
    return sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}*"))


def _history(run_folder: Path, *keys: bytes) -> bytes:
    """The run's .wandb file once it holds `keys`: wandb-core writes it out asynchronously and may
    finish shortly after `run.finish()` returns (the process exit waits for it)."""
    [path] = run_folder.glob("run-*.wandb")
    deadline = time.monotonic() + 10
    while not all(key in (data := path.read_bytes()) for key in keys) and time.monotonic() < deadline:
        time.sleep(0.02)
    return data


def test_offline_run_is_written_under_run_dir(offline_run: Path) -> None:
    [run_folder] = _offline_runs(offline_run)
    keys = (b"learner/loss", b"learner/ok", b"rollout/speedup_max", b"late/gauge", b"step")
    history = _history(run_folder, *keys)
    assert all(key in history for key in keys)
    assert b"warm-up" not in history             # strings stay in metrics.jsonl only
    assert (run_folder / "logs").is_dir() and (run_folder / "files").is_dir()


def test_jsonl_round_trip_writes_non_finite_as_null(offline_run: Path) -> None:
    lines = (offline_run / FILENAME).read_text().splitlines()
    for line in lines:   # strict JSON: a NaN or Infinity token would make this raise
        json.loads(line, parse_constant=lambda token: pytest.fail(f"non-JSON token {token}"))
    records = read_metrics(offline_run)
    assert [r["step"] for r in records] == [0, 3, 1]
    assert all(isinstance(r["time"], float) for r in records)
    first, second, third = ({k: v for k, v in r.items() if k != "time"} for r in records)
    assert first == {"step": 0, "learner/loss": 0.5, "learner/ok": True, "note": "warm-up", "gone": None}
    assert second == {"step": 3, "learner/loss": None, "rollout/speedup_max": None}
    assert third == {"step": 1, "late/gauge": 7}


def test_resume_appends_and_continues_the_wandb_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with MetricsSink(run_dir, OFFLINE, run_config={}) as sink:
        sink.log({"first": 1.0}, step=0)
    run_id = (run_dir / RUN_ID_FILE).read_text().strip()
    with MetricsSink(run_dir, OFFLINE, run_config={}, resume=True) as sink:
        sink.log({"resumed": 2.0}, step=1)
    assert [(r["step"], r.get("first"), r.get("resumed")) for r in read_metrics(run_dir)] == [
        (0, 1.0, None), (1, None, 2.0)]
    assert (run_dir / RUN_ID_FILE).read_text().strip() == run_id
    first, resumed = _offline_runs(run_dir)     # one offline folder per process, both with the run's id
    assert b"first" in _history(first, b"first") and b"resumed" in _history(resumed, b"resumed")


def test_fresh_run_refuses_a_used_run_dir(tmp_path: Path) -> None:
    with MetricsSink(tmp_path, NO_WANDB, run_config={}) as sink:
        sink.log({"a": 1}, step=0)
    with pytest.raises(FileExistsError, match="resume"):
        MetricsSink(tmp_path, NO_WANDB, run_config={})
    assert len(read_metrics(tmp_path)) == 1


def test_torn_last_line_is_skipped_and_repaired_on_resume(tmp_path: Path) -> None:
    with MetricsSink(tmp_path, NO_WANDB, run_config={}) as sink:
        sink.log({"a": 1}, step=0)
        sink.log({"a": 2}, step=1)
    with open(tmp_path / FILENAME, "a") as f:
        f.write('{"step": 2, "a"')                # a crash in the middle of a write
    assert [r["a"] for r in read_metrics(tmp_path)] == [1, 2]
    with MetricsSink(tmp_path, NO_WANDB, run_config={}, resume=True) as sink:
        sink.log({"a": 3}, step=2)
    assert [r["a"] for r in read_metrics(tmp_path)] == [1, 2, 3]


def test_unreadable_middle_line_raises(tmp_path: Path) -> None:
    (tmp_path / FILENAME).write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(CorruptTrajectoryFile, match=":2:"):
        read_metrics(tmp_path)


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    assert read_metrics(tmp_path) == []


def test_reserved_keys_are_refused(tmp_path: Path) -> None:
    with MetricsSink(tmp_path, NO_WANDB, run_config={}) as sink:
        with pytest.raises(ValueError, match="reserved"):
            sink.log({"step": 1}, step=1)
    assert read_metrics(tmp_path) == []


def test_disabled_mode_starts_no_wandb(tmp_path: Path) -> None:
    cfg = MetricsConfig(wandb=True, wandb_mode="disabled")
    with MetricsSink(tmp_path, cfg, run_config={}) as sink:
        sink.log({"a": 1}, step=0)
    assert not (tmp_path / "wandb").exists() and not (tmp_path / RUN_ID_FILE).exists()


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    netrc_path = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc_path))
    return netrc_path


def test_online_without_credentials_fails_before_wandb_starts(tmp_path: Path, no_credentials: Path) -> None:
    cfg = MetricsConfig(wandb=True, wandb_mode="online")
    with pytest.raises(WandbLoginError, match=r"metrics\.wandb_mode.*WANDB_API_KEY"):
        MetricsSink(tmp_path / "run", cfg, run_config={})
    assert not (tmp_path / "run").exists()


def test_credentials_are_found_in_env_or_netrc(no_credentials: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.test")
    assert not _has_wandb_credentials()
    no_credentials.write_text("machine other.example.test login user password k1\n")
    assert not _has_wandb_credentials()
    no_credentials.write_text("machine wandb.example.test login user password k2\n")
    assert _has_wandb_credentials()
    no_credentials.unlink()
    monkeypatch.setenv("WANDB_API_KEY", "k3")
    assert _has_wandb_credentials()


# ---- group_metrics ------------------------------------------------------------------------------

def _traj(reward: float, tokens: int, *, compiled: bool = False, correct: bool = False,
          rejected: str | None = None, speedup: float | None = None, parse_failure: str | None = None,
          truncated: bool = False, extra: dict | None = None) -> Trajectory:
    """A scored completion; `parse_failure` (the parser's reason) means no code and no measurement."""
    m = None if parse_failure is not None else Measurement(task="t", backend="cpu", mode="kernel", compiled=compiled,
                                                           correct=correct, rejected=rejected,
                                                           speedup=speedup, reward=reward, extra=extra or {})
    return Trajectory(index=0, completion="", source=None, reward=reward, measurement=m,
                      token_ids=list(range(tokens)), truncated=truncated, detail=parse_failure or "")


def _groups() -> list[Group]:
    return [
        Group("g1", "a", 0, [
            _traj(1.0, 10, compiled=True, correct=True, speedup=2.0),
            _traj(0.25, 20, compiled=True, correct=True, speedup=0.5),
            _traj(0.0, 30, compiled=True, rejected="incorrect"),
            _traj(0.0, 40, parse_failure="truncated", truncated=True),
        ]),
        Group("g2", "b", 0, [   # every reward 0: zero variance
            _traj(0.0, 50, rejected="side_stream"),
            _traj(0.0, 60, compiled=True, rejected="stale_output"),
            _traj(0.0, 70, rejected="compile_error"),
        ]),
        Group("g3", "c", 0, [
            _traj(0.5, 80, compiled=True, correct=True, speedup=1.1),
            _traj(0.75, 90, compiled=True, correct=True, speedup=1.5, extra={"baseline_drift": {"limit": 2.0}}),
        ]),
    ]


def test_group_metrics_match_hand_computed_values() -> None:
    got = group_metrics(_groups())
    # 9 trajectories; rewards sum to 2.5 and their squares to 1.875; correct speedups 0.5 1.1 1.5 2.0,
    # of which 1.5 (a drifted baseline) is not believed
    expected = {
        "rollout/trajectories": 9.0,
        "rollout/reward_mean": 2.5 / 9,
        "rollout/reward_std": math.sqrt(1.875 / 9 - (2.5 / 9) ** 2),
        "rollout/reward_max": 1.0,
        "rollout/compile_rate": 6 / 9,
        "rollout/correct_rate": 4 / 9,
        "rollout/hack_rejection_rate": 2 / 9,          # side_stream, stale_output
        "rollout/reject_rate/compile_error": 1 / 9,
        "rollout/reject_rate/incorrect": 1 / 9,
        "rollout/reject_rate/side_stream": 1 / 9,
        "rollout/reject_rate/stale_output": 1 / 9,
        "rollout/reject_rate/parse/truncated": 1 / 9,
        "rollout/speedup_p10": 0.5 + 0.2 * (1.1 - 0.5),  # rank 0.2 of 2
        "rollout/speedup_p50": 1.1,
        "rollout/speedup_p90": 1.1 + 0.8 * (2.0 - 1.1),  # rank 1.8 of 2
        "rollout/speedup_max": 2.0,
        "rollout/fast_1.0": 2 / 9,
        "rollout/fast_1.2": 1 / 9,
        "rollout/zero_variance_groups": 1 / 3,
        "rollout/truncated_rate": 1 / 9,
        "rollout/speed_unpaid_rate": 1 / 9,           # g3's second: its baseline drifted
        "rollout/completion_tokens_mean": 50.0,
    }
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_group_metrics_without_correct_kernels_has_no_speedups() -> None:
    got = group_metrics([Group("g", "a", 0, [_traj(0.0, 5, rejected="crash"), _traj(0.0, 5, parse_failure="")])])
    assert not any(key.startswith("rollout/speedup") for key in got)
    assert got["rollout/fast_1.0"] == 0.0 and got["rollout/correct_rate"] == 0.0
    assert got["rollout/reject_rate/crash"] == 0.5 and got["rollout/reject_rate/parse/unknown"] == 0.5
    assert got["rollout/hack_rejection_rate"] == 0.0
    assert got["rollout/zero_variance_groups"] == 1.0


def test_group_metrics_of_nothing_is_empty() -> None:
    assert group_metrics([]) == {}
    assert group_metrics([Group("g", "a", 0, [])]) == {}


def test_hack_reasons_are_real_reason_codes() -> None:
    codes = {r.value for r in Reason}
    assert HACK_REASONS <= codes
    honest_failures = {Reason.MALFORMED, Reason.COMPILE_ERROR, Reason.CRASH, Reason.INCORRECT, Reason.TIMEOUT,
                       Reason.DEGENERATE_TASK, Reason.TIMER_FAILED}
    assert not HACK_REASONS & {r.value for r in honest_failures}
