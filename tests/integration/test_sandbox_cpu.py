"""A crash, hang, memory blow-up or exception costs only that candidate; the next one still works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.evaluation.reward import correct_reward, observed_speedups
from rl_kernels.evaluation.sandbox import WATCH_EVERY_S
from rl_kernels.evaluation.worker import Reporter
from rl_kernels.tasks import get_task
from rl_kernels.types import Measurement

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
TASK = "hgemm/fp32/128_128_128"


def _honest() -> str:
    return (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text()


def _at_most_1x(m: Measurement, cfg: EvalConfig) -> float:
    """The reward of a correct kernel whose speed is not trusted: what its slowest observed speed
    earns (its slowest pair of samples at most its median), capped at 1x's."""
    assert 0 < m.extra["slowest_speedup"] <= m.speedup
    slowest = min(observed_speedups(m))
    return min(correct_reward(slowest, cfg.reward), correct_reward(1.0, cfg.reward))


@pytest.mark.parametrize("name, reason, detail", [
    ("segfault.cpp", "crash", "SIGSEGV"),
    ("hang.cpp", "hung", "did not return"),
    ("huge_alloc.cpp", "out_of_memory", ""),
    ("throws.cpp", "runtime_error", "this kernel refuses to run: M=128"),   # and the line that raised it:
    ("syntax_error.cpp", "compile_error", "expected primary-expression"),
])
def test_failure_costs_only_itself(name: str, reason: str, detail: str, cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.timeout_s = 25
    cfg.sandbox.hang_floor_s = 3
    cfg.sandbox.memory_limit_mb = 6144
    cfg.sandbox.prestart = "after_job"
    evaluator = Evaluator(cfg)
    task = get_task(TASK)
    bad = evaluator.evaluate(task, (CANDIDATES / "sandbox" / name).read_text())
    assert bad.rejected == reason, bad.detail[-1500:]
    assert detail in bad.detail
    if reason == "runtime_error":   # the kernel's error surfaced in the runtime's ctypes call
        assert "raised at runtime.py:" in bad.detail and " in hgemm" in bad.detail, bad.detail
    if name == "hang.cpp":   # the watchdog, not the 25 s wall limit: the floor (3 s) and one call after the last sign of life
        assert bad.eval_seconds < cfg.sandbox.timeout_s, bad.eval_seconds
    assert bad.reward == cfg.reward.fail_reward
    good = evaluator.evaluate(task, _honest())
    assert good.correct and good.rejected is None, good.detail[-1500:]
    if reason != "compile_error":   # the bad one ran: the good one's worker, started when it ended, is untouched by it
        assert good.extra["workers"][0] == "standby"


# Hangs and slow kernels: torch's fp16 matmul takes ~3.4 ms on 192^3 here, so one call's allowance
# (hang_factor x that) is ~0.7 s and a timed window's ~7 s: the calls in flight decide, not the floor.
HANG_TASK = "hgemm/fp32/192_192_192"
# How late past its limit the verdict may still come: the parent's poll and kill, and its thread's
# turn on a loaded 2-core host.  The limit itself is computed from the config.
LATE_S = 1.0


def _hang_config(cpu_config: EvalConfig) -> EvalConfig:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.hang_floor_s = 0.5   # small: the allowance of the calls in flight must carry the slow kernel
    cfg.sandbox.timeout_s = 60
    return cfg


def _per_call_s(m: Measurement, cfg: EvalConfig) -> float:
    """What the watchdog allows each candidate call: hang_factor times the baseline's median."""
    return cfg.sandbox.hang_factor * m.baselines_ms[m.baseline] / 1e3


@pytest.mark.parametrize("name, phase", [("hang_first_call_cpu.cpp", "correctness"),
                                         ("hang_at_call_cpu.cpp", "timing")])
def test_a_hang_is_reported_once_the_calls_in_flight_should_have_ended(name: str, phase: str,
                                                                       cpu_config: EvalConfig) -> None:
    """A kernel that never returns, at its first call (correctness: one call in flight) or at its
    25th (a timed window of the runner: `window_calls` in flight), is `hung`: reported the floor
    after those calls should have ended at the slowest speed still measured, in the phase it hung
    in, long before the job's wall limit."""
    cfg = _hang_config(cpu_config)
    m = Evaluator(cfg).evaluate(get_task(HANG_TASK), (CANDIDATES / "sandbox" / name).read_text())
    assert m.rejected == "hung" and "did not return" in m.detail and f"in phase {phase}" in m.detail, m.detail[-800:]
    in_flight = 1 if phase == "correctness" else cfg.timing.window_calls
    allowed = cfg.sandbox.hang_floor_s + in_flight * _per_call_s(m, cfg)
    hang = m.extra["hang"]
    assert hang["phase"] == phase and hang["calls"] == in_flight, hang
    assert hang["limit_s"] == pytest.approx(allowed, abs=1e-3)
    assert allowed < hang["silent_s"] <= allowed + WATCH_EVERY_S + LATE_S, hang
    if phase == "correctness":   # from the phase's start to the kill: the one call, and no more
        assert m.extra["phase_s"][phase] <= allowed + Reporter.BEAT_EVERY_S + WATCH_EVERY_S + LATE_S, m.extra["phase_s"]
    assert m.eval_seconds < cfg.sandbox.timeout_s
    assert m.reward == cfg.reward.fail_reward and not m.correct


def test_a_slow_honest_kernel_is_measured_not_killed(cpu_config: EvalConfig) -> None:
    """An honest kernel at ~0.02x (idle here, a window of its timed calls outlasts the floor plus
    one call's allowance: what the watchdog allowed a window before it counted the calls in
    flight) is measured correct at its own speed, under the same floor as the hangs above.  The
    speed band is wide: host load slows torch's two threads more than the kernel's one."""
    cfg = _hang_config(cpu_config)
    m = Evaluator(cfg).evaluate(get_task(HANG_TASK), (CANDIDATES / "sandbox" / "slow_honest_cpu.cpp").read_text())
    assert m.rejected is None and m.correct, m.detail[-800:]
    assert "hang" not in m.extra
    assert 0.008 <= m.speedup <= 0.06, m.speedup


def test_cli_eval_json_contract(cpu_config: EvalConfig, tmp_path: Path) -> None:
    candidate = CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp"
    out = subprocess.run(
        [sys.executable, "-m", "rl_kernels.cli", "eval", "--task", TASK, "--candidate", str(candidate),
         "--backend", "cpu", "--json", f"eval.build.cache_dir={cpu_config.build.cache_dir}"],
        capture_output=True, text=True, timeout=300, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("task", "backend", "mode", "compiled", "correct", "rejected", "candidate_ms",
                "baseline_ms", "speedup", "noise", "reward"):
        assert key in data
    assert data["task"] == TASK and data["backend"] == "cpu" and data["mode"] == "kernel"
    assert data["compiled"] and data["correct"] and data["rejected"] is None
    assert data["speedup"] == pytest.approx(data["baseline_ms"] / data["candidate_ms"])


@pytest.mark.parametrize("mode", ["offline", "server"])
def test_cuda_l2_modes_on_cpu(mode: str, cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.timing.mode = mode
    m = Evaluator(cfg).evaluate(get_task(TASK), _honest())
    assert m.correct and m.mode == mode and m.samples >= 30
    assert m.candidate_ms > 0 and m.baseline_ms > 0
    # where the worker's time went, phase by phase, in the order the worker went through them
    assert list(m.extra["phase_s"]) == ["start", "setup", "warm", "share", "load", "correctness", "timing", "teardown"]
    assert all(v >= 0 for v in m.extra["phase_s"].values())
    assert sum(m.extra["phase_s"].values()) <= m.eval_seconds


def test_a_kernel_that_needs_more_of_torch_than_the_shim_builds_against_torch(cpu_config: EvalConfig) -> None:
    """c10/util/irange.h is not in the fast shim: the build falls back to torch's own headers, says
    so, and the kernel is evaluated like any other (its artifact links libtorch)."""
    source = (Path(__file__).resolve().parents[1] / "candidates" / "honest" / "hgemm_cpu_torch_headers.cpp").read_text()
    m = Evaluator(cpu_config).evaluate(get_task(TASK), source)
    assert m.correct and m.rejected is None, m.detail[-800:]
    assert m.extra["build_path"] == "torch"
    shim = Evaluator(cpu_config).evaluate(get_task(TASK), _honest())
    assert shim.extra["build_path"] == "shim"


def test_a_measurement_that_never_settles_is_reported_and_earns_no_speedup(cpu_config: EvalConfig) -> None:
    """Spread above the backend's limit: re-measured in a new process, still above: reported with both
    spreads, correct, and paid at most as a 1x kernel."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.reward.max_spread = {"cpu": 1e-9}
    m = Evaluator(cfg).evaluate(get_task(TASK), _honest())
    assert m.correct and m.rejected is None, m.detail
    unstable = m.extra["unstable_measurement"]
    assert unstable["candidate_spread"] == m.candidate_spread and unstable["baseline_spread"] == m.baseline_spread
    assert m.extra["remeasured"] == cfg.reward.remeasure_attempts and len(m.extra["seeds"]) == 2
    assert "unstable_measurement" in m.detail
    assert m.reward == pytest.approx(_at_most_1x(m, cfg))


def test_a_baseline_far_off_its_record_earns_no_speedup_and_stays_out_of_the_record(
        cpu_config: EvalConfig, tmp_path: Path) -> None:
    """The record says the baseline runs 20x faster than it does here (as if every earlier evaluation
    had an idle host and this one a loaded one): re-measured in a new process, still off: reported
    with both medians, correct, paid at most as a 1x kernel, and the record keeps its values."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.build.cache_dir = str(tmp_path / "cache")
    # An evaluation whose samples never settle is reported as unstable and skips the drift check; on a
    # loaded host the cpu timer's spread can pass the limit, so it is lifted: this test is the drift.
    cfg.reward.max_spread = {"cpu": 1e9}
    evaluator = Evaluator(cfg)
    task = get_task(TASK)
    baseline, medians = evaluator.best_baseline(task)     # the baseline job adds its median to the record
    record = evaluator.baseline_record(task)
    assert record.ms[baseline] == [medians[baseline]]
    for _ in range(cfg.reward.baseline_record_min):
        record.add({baseline: medians[baseline] / 20})
    seeded = list(evaluator.baseline_record(task).ms[baseline])
    m = evaluator.evaluate(task, _honest())
    assert m.correct and m.rejected is None, m.detail
    drift = m.extra["baseline_drift"]
    assert drift["reference_ms"] == pytest.approx(medians[baseline] / 20) and drift["baseline_ms"] == m.baseline_ms
    assert m.baseline_ms > cfg.reward.baseline_drift["cpu"] * drift["reference_ms"]
    assert m.extra["remeasured"] == cfg.reward.remeasure_attempts and len(m.extra["seeds"]) == 2
    assert m.detail.startswith("baseline_drift: baseline ") and "host was disturbed" in m.detail
    assert m.reward == pytest.approx(_at_most_1x(m, cfg))
    assert evaluator.baseline_record(task).ms[baseline] == seeded


def test_evaluations_on_the_record_add_to_it(cpu_config: EvalConfig, tmp_path: Path) -> None:
    """From `baseline_record_min` kept medians on, every evaluation is checked against their median,
    and each one on it adds its own baseline median."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.build.cache_dir = str(tmp_path / "cache")
    cfg.reward.baseline_record_min = 2
    cfg.reward.baseline_drift = {"cpu": 100.0}    # wide: this test is the bookkeeping, not the host's noise
    evaluator = Evaluator(cfg)
    task = get_task(TASK)
    first = evaluator.evaluate(task, _honest())
    assert "baseline_reference_ms" not in first.extra      # one median kept (the baseline job's): no check yet
    second = evaluator.evaluate(task, _honest())
    assert second.extra["baseline_reference_ms"] > 0
    for m in (first, second):
        assert m.correct and "baseline_drift" not in m.extra and "remeasured" not in m.extra, m.detail
    kept = evaluator.baseline_record(task).ms[first.baseline]
    assert kept[1:] == [first.baseline_ms, second.baseline_ms] and len(kept) == 3


def test_bench_over_a_directory(cpu_config: EvalConfig, tmp_path: Path) -> None:
    (tmp_path / "128_128_128.cpp").write_text(_honest())
    (tmp_path / "128_128_64.cpp").write_text((CANDIDATES / "sandbox" / "syntax_error.cpp").read_text())
    out = subprocess.run(
        [sys.executable, "-m", "rl_kernels.cli", "bench", "--suite", "hgemm/fp32", "--candidates", str(tmp_path),
         "--backend", "cpu", f"eval.build.cache_dir={cpu_config.build.cache_dir}"],
        capture_output=True, text=True, timeout=600, check=True)
    assert "summary: 1/2 correct (1 compiled)" in out.stdout
    assert "compile_error" in out.stdout
    assert "build (" in out.stderr and "2/2" in out.stderr   # the build phase ran first, with a progress bar


def test_cli_build_json_contract(cpu_config: EvalConfig, tmp_path: Path) -> None:
    def build(candidate: Path) -> tuple[int, dict]:
        out = subprocess.run(
            [sys.executable, "-m", "rl_kernels.cli", "build", "--task", TASK, "--candidate", str(candidate),
             "--backend", "cpu", "--json", f"eval.build.cache_dir={cpu_config.build.cache_dir}"],
            capture_output=True, text=True, timeout=300)
        return out.returncode, json.loads(out.stdout.strip().splitlines()[-1])

    rc, ok = build(CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp")
    assert rc == 0 and ok["compiled"] and ok["gate"] is None and ok["build_path"] == "shim"
    assert set(ok) >= {"task", "backend", "gate", "compiled", "build_path", "build_seconds", "cached", "log"}
    rc, gated = build(CANDIDATES / "hacks" / "hgemm" / "thread_cpu.cpp")
    assert rc == 1 and gated["gate"] == "thread_spawn" and not gated["compiled"]
    rc, evidence = build(CANDIDATES / "hacks" / "trust" / "fork_label_cpu.cpp")
    assert rc == 1 and evidence["gate"] is None and evidence["reason"] == "process_spawn"
    assert "imports fork" in evidence["log"]


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "rl_kernels.cli", "eval", "--task", TASK, "--candidate", "x.cu",
                          "eval.timing.samples=3", "eval.nonsense=1"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "eval.timing.samples" in out.stderr and "eval.nonsense" in out.stderr
