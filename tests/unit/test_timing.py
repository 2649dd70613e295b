from __future__ import annotations

import time

import pytest

from rl_kernels.config import TimingConfig
from rl_kernels.evaluation.timing import Flusher, Side, interleaved, rel_spread


def test_rel_spread() -> None:
    assert rel_spread([1.0] * 10) == 0.0
    assert rel_spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4.5 - 1.5) / 3.0)


@pytest.mark.parametrize("mode", ["kernel", "offline", "server"])
def test_interleaved_cpu_times_both_sides_and_rechecks(mode: str) -> None:
    cfg = TimingConfig(mode=mode, samples=30, warmup=2, server_qps=2000)
    order: list[str] = []
    seen: list[int] = []

    def sleeper(name: str, seconds: float):
        def run(i: int) -> int:
            order.append(name)
            seen.append(i)
            time.sleep(seconds)
            return i
        return run

    checked: list[tuple[int, int]] = []
    res = interleaved({"fast": Side(sleeper("fast", 0.001)), "slow": Side(sleeper("slow", 0.003))}, 8, cfg, "cpu",
                      Flusher("cpu", 1 << 20), recheck_side="fast", recheck=lambda i, out: checked.append((i, out)),
                      recheck_calls=3, seed=1)
    assert len(res.ms["fast"]) == len(res.ms["slow"]) == 30
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    assert 2.0 < med(res.ms["slow"]) / med(res.ms["fast"]) < 4.5
    assert res.rechecked == 3 and all(i == out for i, out in checked)
    timed = order[2 * cfg.warmup:]
    rounds = [tuple(timed[j:j + 2]) for j in range(0, 60, 2)]
    assert all(sorted(r) == ["fast", "slow"] for r in rounds)    # each round runs each side once
    firsts = [r[0] for r in rounds]
    assert 5 <= firsts.count("fast") <= 25                      # in a random order
    assert len(set(seen)) > 4                                   # a pool of sets, not one buffer
