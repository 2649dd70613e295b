from __future__ import annotations

import dataclasses
import math

import pytest

from rl_kernels.config import RewardConfig, RooflineConfig
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.evaluation.reward import (UNTRUSTED_SPEED_FLAGS, correct_reward, measurement_reward, noise_floor,
                                         shrink_log_speedup, split_training_reward, training_reward)
from rl_kernels.evaluation.roofline import device_peaks, min_time_ms
from rl_kernels.types import Measurement


def test_gains_inside_the_noise_count_for_nothing() -> None:
    cfg = RewardConfig()
    assert shrink_log_speedup(1.02, 0.03) == 0.0
    assert shrink_log_speedup(0.98, 0.03) == 0.0
    assert correct_reward(1.0, cfg) == pytest.approx(cfg.correct_base)
    assert shrink_log_speedup(2.0, 0.03) == pytest.approx(math.log(2.0) - math.log(1.03))


def test_reward_is_clipped_and_correct_always_beats_failure() -> None:
    cfg = RewardConfig()
    assert correct_reward(1e-6, cfg) == cfg.min_correct_reward > cfg.fail_reward
    top = correct_reward(1e6, cfg)
    assert top == pytest.approx(cfg.correct_base + min(cfg.log_speedup_clip,
                                                        math.log(cfg.speedup_ceiling) - math.log1p(cfg.noise_floor)))
    assert correct_reward(3.0, cfg) > correct_reward(2.0, cfg) > correct_reward(1.0, cfg)


def test_noisy_measurements_raise_the_floor() -> None:
    cfg = RewardConfig()
    assert noise_floor(None, 30, cfg) == cfg.noise_floor
    assert noise_floor(0.01, 30, cfg) == cfg.noise_floor
    wide = noise_floor(0.5, 30, cfg)
    assert wide == pytest.approx(3.0 * 0.93 * 0.5 / math.sqrt(30))
    assert correct_reward(1.2, cfg, wide) == pytest.approx(cfg.correct_base)


def test_roofline_bounds_from_table_and_config() -> None:
    flops, bw = device_peaks("NVIDIA H200", RooflineConfig())
    assert flops == pytest.approx(989e12) and bw == pytest.approx(4800e9)
    assert device_peaks("Some New GPU", RooflineConfig()) == (None, None)
    assert device_peaks("Some New GPU", RooflineConfig(peak_tflops_fp16=100, peak_gbps=1000)) == (1e14, 1e12)
    t = min_time_ms(2 * 4096**3, 3 * 2 * 4096**2, "NVIDIA H200", RooflineConfig())
    assert t == pytest.approx(2 * 4096**3 / 989e12 * 1e3)
    assert min_time_ms(1e9, 1e6, "cpu", RooflineConfig()) is None


def test_measurement_reward_is_the_one_place_a_verdict_becomes_a_number() -> None:
    cfg = RewardConfig()
    base = Measurement(task="t", backend="cpu", mode="kernel", compiled=True, correct=True, speedup=2.0,
                       extra={"noise_floor": 0.05})
    assert measurement_reward(base, cfg) == pytest.approx(correct_reward(2.0, cfg, 0.05))
    assert measurement_reward(dataclasses.replace(base, extra={}), cfg) == pytest.approx(correct_reward(2.0, cfg))
    for failed in (dict(rejected="incorrect", correct=False), dict(rejected="timer_failed"),
                   dict(flagged="speedup 25.00x above the ceiling"), dict(speedup=None), dict(correct=False)):
        assert measurement_reward(dataclasses.replace(base, **failed), cfg) == cfg.fail_reward, failed


@pytest.mark.parametrize("untrusted", [{"unstable_measurement": {"candidate_spread": 0.02, "baseline_spread": 0.6}},
                                       {"baseline_drift": {"baseline_ms": 4.0, "reference_ms": 1.0, "limit": 2.0}}])
def test_an_untrusted_speed_counts_against_a_kernel_never_for_it(untrusted: dict) -> None:
    """Unstable or drifted: a fast kernel is paid as 1x, a slow one as what it measured, so neither a
    slow kernel that makes its own timing jitter nor a host that slows the baseline gains anything."""
    cfg = RewardConfig()
    m = Measurement(task="t", backend="cuda", mode="kernel", compiled=True, correct=True, speedup=2.4, extra=untrusted)
    assert measurement_reward(m, cfg) == pytest.approx(cfg.correct_base)
    slow = dataclasses.replace(m, speedup=0.3)
    assert measurement_reward(slow, cfg) == pytest.approx(correct_reward(0.3, cfg))
    assert correct_reward(0.3, cfg) < cfg.correct_base
    assert measurement_reward(slow, cfg) == measurement_reward(dataclasses.replace(slow, extra={}), cfg)


def _unstable(speedup: float, slowest: float, flag: str = "unstable_measurement") -> Measurement:
    """A correct kernel whose timing never settled: `speedup` reported, `slowest` its slowest pair."""
    return Measurement(task="t", backend="cpu", mode="module", compiled=True, correct=True, speedup=speedup,
                       noise=1.2, samples=30, extra={flag: {"candidate_spread": 1.3}, "slowest_speedup": slowest,
                                                     "noise_floor": 0.4})


def _stable_reward(speedup: float, cfg: RewardConfig) -> float:
    """The least a stable kernel measured at `speedup` earns (the tightest floor any measurement gets)."""
    m = Measurement(task="t", backend="cpu", mode="module", compiled=True, correct=True, speedup=speedup,
                    extra={"noise_floor": cfg.noise_floor})
    return measurement_reward(m, cfg)


@pytest.mark.parametrize("flag", UNTRUSTED_SPEED_FLAGS)
def test_erratic_timing_never_pays_more_than_the_slowest_speed_it_showed(flag: str) -> None:
    """A 0.2x kernel that makes its timing jump between 0.2x and 1.5x earns no more than a steady
    0.2x kernel; one whose slowest pair is 1.3x earns no more than a steady 1.3x one (and no speed
    term)."""
    cfg = RewardConfig()
    slow = measurement_reward(_unstable(1.1, 0.2, flag), cfg)
    assert slow <= _stable_reward(0.2, cfg) < cfg.correct_base
    fast = measurement_reward(_unstable(2.0, 1.3, flag), cfg)
    assert fast <= _stable_reward(1.3, cfg) and fast == pytest.approx(cfg.correct_base)
    assert measurement_reward(_unstable(0.5, 0.9, flag), cfg) <= _stable_reward(0.5, cfg)   # the median is lower


def test_a_drifted_baseline_pays_no_more_than_the_speed_against_its_record() -> None:
    """A disturbed host slowed the baseline 4x: the kernel's speed against the usual baseline counts."""
    cfg = RewardConfig()
    m = Measurement(task="t", backend="cpu", mode="module", compiled=True, correct=True, speedup=1.6, candidate_ms=2.0,
                    baseline_ms=3.2, extra={"baseline_drift": {"baseline_ms": 3.2, "reference_ms": 0.8}})
    assert measurement_reward(m, cfg) <= _stable_reward(0.4, cfg)


def test_a_stable_kernel_is_paid_its_measured_speed_whatever_its_slowest_pair() -> None:
    cfg = RewardConfig()
    m = dataclasses.replace(_unstable(2.0, 0.2), extra={"slowest_speedup": 0.2, "noise_floor": 0.05})
    assert measurement_reward(m, cfg) == pytest.approx(correct_reward(2.0, cfg, 0.05))


def test_the_slowest_pair_is_kept_over_every_re_measurement() -> None:
    m = Measurement(task="t", backend="cpu", mode="module")
    Evaluator._keep_slowest(m, [1.4, 0.3, 1.1])
    Evaluator._keep_slowest(m, [1.2, 0.9])
    Evaluator._keep_slowest(m, [])
    assert m.extra["slowest_speedup"] == 0.3


def test_a_training_reward_splits_into_its_gate_and_speed_term() -> None:
    cfg = RewardConfig(correct_base=3.0, format_reward=0.01, compile_reward=0.03)
    fast = Measurement(task="t", backend="cpu", mode="module", compiled=True, correct=True, speedup=2.0)
    fast = dataclasses.replace(fast, reward=measurement_reward(fast, cfg))
    gate, speed = split_training_reward(training_reward(fast, cfg), fast, cfg)
    assert gate == 3.0 and speed == pytest.approx(math.log(2.0) - math.log(1.03))
    flagged = dataclasses.replace(fast, flagged="speedup_ceiling")       # correct, but its speed is not believed
    flagged = dataclasses.replace(flagged, reward=measurement_reward(flagged, cfg))
    assert split_training_reward(training_reward(flagged, cfg), flagged, cfg) == (0.0, None)
    built = Measurement(task="t", backend="cpu", mode="module", compiled=True)   # failed after building
    assert split_training_reward(training_reward(built, cfg), built, cfg) == (0.03, None)
    assert split_training_reward(0.0, None, cfg) == (0.0, None)                  # no code extracted
