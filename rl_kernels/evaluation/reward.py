"""The reward: the one place a Measurement becomes a number (DESIGN.md protocol step 5).

`measurement_reward` is the evaluator's: 0 (`fail_reward`) when any gate failed or the speedup is
flagged; a correct kernel whose timing stayed unstable, or whose baseline stayed far off its record,
after re-measuring earns at most what a 1x kernel earns (its speed may count against it, never for it); any other correct kernel earns `correct_base` plus its log-speedup, counted only beyond the noise
floor (so a re-measured copy of the baseline earns exactly the base), clipped on both sides, and
never below `min_correct_reward`: a slow but correct kernel still beats a broken one, which keeps
the incentive to stay correct.  `training_reward` is what the learner sees: the evaluator's reward
plus the opt-in shaping of honest failures.  Everything else (evaluator, rollout, timer actor)
calls these two; `split_training_reward` takes a training reward apart again for the learner's
decoupled advantages.
"""

from __future__ import annotations

import math

from rl_kernels.config import RewardConfig
from rl_kernels.evaluation.reasons import HACK_REASONS
from rl_kernels.types import Measurement


def shrink_log_speedup(speedup: float, noise_floor: float) -> float:
    """ln(speedup) moved towards 0 by ln(1 + floor): gains inside the noise count for nothing."""
    x = math.log(speedup)
    band = math.log1p(noise_floor)
    return math.copysign(max(0.0, abs(x) - band), x)


def noise_floor(noise: float | None, samples: int, cfg: RewardConfig) -> float:
    """The configured floor, or `noise_sigmas` standard errors of this measurement's speedup if larger.

    `noise` is the IQR/median of the per-pair speedups; the median of n samples has a standard
    error of about 0.93 IQR / sqrt(n) (normal approximation).
    """
    if not noise or samples <= 0:
        return cfg.noise_floor
    return max(cfg.noise_floor, cfg.noise_sigmas * 0.93 * noise / samples ** 0.5)


def correct_reward(speedup: float, cfg: RewardConfig, floor: float | None = None) -> float:
    x = shrink_log_speedup(min(speedup, cfg.speedup_ceiling), cfg.noise_floor if floor is None else floor)
    x = max(-cfg.log_speedup_clip, min(cfg.log_speedup_clip, x))
    return max(cfg.min_correct_reward, cfg.correct_base + x)


def earned_correct_reward(m: Measurement) -> bool:
    """Passed every gate with a speedup that was not flagged: the kernels `correct_reward` scores."""
    return m.rejected is None and m.correct and m.flagged is None and bool(m.speedup)


def untrusted_speed(m: Measurement) -> bool:
    """Its timing never settled, or its baseline measured far off its record: the speed it reports
    may count against the kernel, never for it (and stays out of the baseline record)."""
    return bool(m.extra.get("unstable_measurement") or m.extra.get("baseline_drift"))


def measurement_reward(m: Measurement, cfg: RewardConfig) -> float:
    """The evaluator's reward for a finished measurement (its gates, flags and speedup as recorded)."""
    if not earned_correct_reward(m):
        return cfg.fail_reward
    paid = correct_reward(m.speedup, cfg, m.extra.get("noise_floor"))
    if untrusted_speed(m):
        # An untrusted speed may count against the kernel, never for it: neither a slow kernel that
        # makes its own timing jitter nor a host that slows the baseline earns more than a 1x kernel.
        return min(paid, correct_reward(1.0, cfg))
    return paid


def training_reward(m: Measurement | None, cfg: RewardConfig) -> float:
    """The evaluator's reward, plus the opt-in shaping of failures (`reward.format_reward`,
    `reward.compile_reward`): never for an answer without code (`m` None) nor for a rejected hack."""
    if m is None or m.rejected in HACK_REASONS:
        return cfg.fail_reward
    if m.correct:
        return m.reward
    return cfg.compile_reward if m.compiled else cfg.format_reward


def split_training_reward(reward: float, m: Measurement | None, cfg: RewardConfig) -> tuple[float, float | None]:
    """(gate, speed) with gate + speed == `reward`, the training reward of this completion.

    A kernel that earned the correct reward splits into `correct_base` (the gate) and the rest (its
    speed term: the clipped, floor-shrunk log-speedup, or the floor's share); anything else is all
    gate, with no speed term (None). The learner's decoupled advantages normalise the two apart.
    """
    if m is None or not earned_correct_reward(m) or reward < cfg.min_correct_reward:
        return reward, None
    return cfg.correct_base, reward - cfg.correct_base
