"""The reward: the one place a Measurement becomes a number (DESIGN.md protocol step 5).

`measurement_reward` is the evaluator's: 0 (`fail_reward`) when any gate failed or the speedup is
flagged; a correct kernel whose speed is not believed (`untrusted_speed`) earns at most what the
slowest speed it showed would earn, and never more than a 1x kernel (`untrusted_speed_reward`); any
other correct kernel earns `correct_base` plus its log-speedup, counted only beyond the noise
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


# The `Measurement.extra` keys the evaluator sets when a correct kernel's speed is not believed:
# its timing never settled (`reward.max_spread`), or its baseline measured far off the record
# (`reward.baseline_drift`). A speedup above the ceiling sets `Measurement.flagged` instead and earns
# nothing; the clock check and the roofline refuse (`timer_patched`, `faster_than_roofline`); a
# statistical refusal that a new measurement clears, or an unreadable baseline record, leave the
# speed believed.
UNTRUSTED_SPEED_FLAGS: tuple[str, ...] = ("unstable_measurement", "baseline_drift")


def untrusted_speed(m: Measurement) -> bool:
    """Its timing never settled, or its baseline measured far off its record: the speed it reports
    may count against the kernel, never for it (and stays out of the baseline record and out of
    everything that ranks kernels by speed)."""
    return any(m.extra.get(flag) for flag in UNTRUSTED_SPEED_FLAGS)


def observed_speedups(m: Measurement) -> list[float]:
    """Every speed this evaluation showed for the kernel: its reported speedup, the slowest pair of
    samples over all its measurements (`extra["slowest_speedup"]`), and, when its baseline drifted,
    its speed against the baseline's recorded median. A kernel that makes its own timing erratic
    shows its true slowness in some of these."""
    speeds = [m.speedup, m.extra.get("slowest_speedup")]
    drift = m.extra.get("baseline_drift")
    if isinstance(drift, dict) and drift.get("reference_ms") and m.candidate_ms:
        speeds.append(drift["reference_ms"] / m.candidate_ms)
    return [s for s in speeds if isinstance(s, (int, float)) and s > 0]


def untrusted_speed_reward(m: Measurement, cfg: RewardConfig) -> float:
    """The most a correct kernel with an untrusted speed earns: the reward of the slowest speed it
    showed, or of no speed term (1x), whichever is lower.

    Paying its reported (median) speed, or a flat 1x, would let a slow kernel that makes its own
    timing erratic (sleeping or spinning on some calls) earn more than its honest speed; the
    slowest sample is the one its erratic calls cannot lift. It is scored with the configured noise
    floor, the smallest any measurement gets, so no stable kernel measured at that speed earns less.
    """
    slowest = min([*observed_speedups(m), 1.0])
    return correct_reward(slowest, cfg, cfg.noise_floor)


def measurement_reward(m: Measurement, cfg: RewardConfig) -> float:
    """The evaluator's reward for a finished measurement (its gates, flags and speedup as recorded)."""
    if not earned_correct_reward(m):
        return cfg.fail_reward
    if untrusted_speed(m):
        return untrusted_speed_reward(m, cfg)
    return correct_reward(m.speedup, cfg, m.extra.get("noise_floor"))


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
