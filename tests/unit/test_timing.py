from __future__ import annotations

import time
from collections import deque

import pytest
import torch

from rl_kernels.config import TimingConfig
from rl_kernels.evaluation.problems import InputSet
from rl_kernels.evaluation.timing import Flusher, FreshValues, LaunchBook, Side, interleaved, rel_spread


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


def test_no_call_sees_values_an_earlier_call_saw_nor_finds_a_later_calls_values() -> None:
    """With `fresh`, values are drawn for the whole pool in one burst once every set was used, and
    each set's are written into it right before its call, warm-up included: no call sees values an
    earlier call saw, and when a call runs no set holds values of a call still to come."""
    cfg = TimingConfig(samples=30, warmup=1)
    pool_n = 6
    pool = [InputSet([torch.zeros(1)]) for _ in range(pool_n)]
    draws: list[int] = []

    class Counting:   # every draw gives every set a value never drawn before
        def refresh(self, s: InputSet, dist: str, gen: torch.Generator) -> None:
            draws.append(len(draws))
            s.args[0].fill_(float(len(draws)))
            s.reference = None

    calls: list[tuple[float, list[float]]] = []   # (the call's value, every set's value at that moment)

    def run(i: int) -> int:
        calls.append((pool[i].args[0].item(), [s.args[0].item() for s in pool]))
        return i

    fresh = FreshValues(Counting(), pool, "normal", torch.Generator())
    interleaved({"a": Side(run), "b": Side(run)}, pool_n, cfg, "cpu", None, fresh=fresh, seed=3)
    values = [v for v, _ in calls]
    assert len(values) == 2 * (cfg.warmup + cfg.samples)
    assert len(set(values)) == len(values) and 0.0 not in values     # every call new values
    for k, (_, visible) in enumerate(calls):
        later = set(values[k + 1:])
        assert not later & set(visible), f"call {k} could read values of a later call"
    assert len(draws) == pool_n * -(-len(values) // pool_n)          # one burst per pool's worth of calls


def test_a_rechecked_call_is_prepared_before_it_runs_and_checked_after() -> None:
    """`before_recheck(i)` (reference and inputs fixed) comes right before the checked call on set i,
    `recheck(i, out)` right after it, for exactly `recheck_calls` calls of the checked side."""
    cfg = TimingConfig(samples=30, warmup=1)
    events: list[tuple[str, str, int]] = []

    def side(name: str) -> Side:
        def run(i: int) -> int:
            events.append(("run", name, i))
            return i
        return Side(run)

    interleaved({"cand": side("cand"), "base": side("base")}, 8, cfg, "cpu", None, recheck_side="cand",
                recheck=lambda i, out: events.append(("check", "cand", i)), recheck_calls=3, seed=5,
                before_recheck=lambda i: events.append(("before", "cand", i)))
    befores = [j for j, e in enumerate(events) if e[0] == "before"]
    assert len(befores) == 3
    for j in befores:
        assert events[j + 1] == ("run", "cand", events[j][2]) and events[j + 2] == ("check", "cand", events[j][2])


def _feed(book: LaunchBook, calls: list[tuple[float, float]]) -> LaunchBook:
    for spin_ms, host_ms in calls:
        book.add(spin_ms, host_ms)
    return book


def test_a_side_whose_host_time_follows_the_spin_waits_for_the_device() -> None:
    # A synchronising call: host time = the spin it waited for + 0.2 ms of its own work.
    spins = [0.1, 0.6, 1.6, 3.6]
    book = _feed(LaunchBook(deque(maxlen=8)), [(s, s + 0.2) for s in spins])
    assert book.waits_for_the_device


def test_a_synchronising_call_that_sends_the_spin_to_its_cap_at_once_waits_for_the_device() -> None:
    # A 5 ms synchronising call: the first adapted spin is already the cap (10 ms), so the spin
    # grows once and never again; the host time still covers the whole spin at the cap.
    book = _feed(LaunchBook(deque(maxlen=8)), [(0.05, 5.1), (10.0, 15.1)])
    assert not book.waits_for_the_device
    book.add(10.0, 15.2, at_cap=True)
    assert book.waits_for_the_device


def test_a_slow_asynchronous_launch_at_the_cap_is_not_mistaken_for_a_synchronising_one() -> None:
    # 6 ms on the host whatever the spin: the spin goes to its cap and stays, never covered.
    book = _feed(LaunchBook(deque(maxlen=8)), [(0.05, 6.0)])
    for _ in range(20):
        book.add(10.0, 6.0, at_cap=True)
    assert not book.waits_for_the_device


def test_a_host_heavy_launch_is_not_mistaken_for_a_synchronising_one() -> None:
    # 0.5 ms on the host whatever the spin (torch.compile's guards), with one spike.
    calls = [(0.1, 0.5), (1.0, 0.5), (1.0, 0.9), (1.8, 1.6), (3.2, 0.5), (3.2, 0.5)]
    book = _feed(LaunchBook(deque(maxlen=8)), calls)
    assert not book.waits_for_the_device
    assert list(book.recent) == [h for _, h in calls]
