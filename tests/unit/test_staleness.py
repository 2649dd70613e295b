"""The staleness manager: capacity rule, backpressure, admission, protocol errors, resume, and a
randomized pipeline checked step by step against independent bookkeeping."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from rl_kernels.staleness import LOST_ON_RESTART, StalenessManager, StaleVersionError


def _fill(mgr: StalenessManager, prefix: str, n: int, version: int | None = None) -> list[str]:
    """Submit n groups (all must be admitted) and return their ids."""
    ids = [f"{prefix}{i}" for i in range(n)]
    for gid in ids:
        assert mgr.try_submit(gid, mgr.version if version is None else version)
    return ids


def _learn(mgr: StalenessManager, ids: list[str]) -> None:
    """Accept, consume and publish: one learner step on exactly these groups."""
    for gid in ids:
        mgr.on_accepted(gid)
    mgr.on_consumed(ids)
    mgr.set_version(mgr.version + 1)


# ----------------------------------------------------------------------------------------------
# construction and the capacity rule


@pytest.mark.parametrize(("max_staleness", "batch_groups", "name"), [
    (-1, 4, "max_staleness"),
    (1.5, 4, "max_staleness"),
    (True, 4, "max_staleness"),
    (2, 0, "batch_groups"),
    (2, "4", "batch_groups"),
])
def test_constructor_names_the_bad_argument(max_staleness: object, batch_groups: object, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        StalenessManager(max_staleness, batch_groups)  # type: ignore[arg-type]


def test_capacity_at_version_zero() -> None:
    mgr = StalenessManager(max_staleness=2, batch_groups=4)
    assert mgr.capacity() == (2 + 0 + 1) * 4 == 12
    a, b, c = _fill(mgr, "g", 3)
    assert mgr.capacity() == 9
    mgr.on_accepted(a)  # accepted still holds its slot until the learner moves on
    assert mgr.capacity() == 9
    mgr.on_filtered(b, "zero_variance")  # filtered and failed give it back
    mgr.on_failed(c, "generator_crash")
    assert mgr.capacity() == 11
    mgr.on_consumed([a])  # consuming alone frees nothing: the version does
    assert mgr.capacity() == 11


def test_capacity_after_several_versions() -> None:
    s, b = 1, 3
    mgr = StalenessManager(max_staleness=s, batch_groups=b)
    for v in range(5):
        assert mgr.version == v
        assert mgr.capacity() == (s + v + 1) * b - v * b == (s + 1) * b
        _learn(mgr, _fill(mgr, f"v{v}-", b))
    running = _fill(mgr, "r", 2)
    mgr.on_accepted(running[0])
    assert mgr.capacity() == (s + 5 + 1) * b - (5 * b + 2)
    mgr.set_version(8)  # versions may jump; the budget follows the formula
    assert mgr.capacity() == (s + 8 + 1) * b - (5 * b + 2)


def test_backpressure_when_full_drops_nothing() -> None:
    mgr = StalenessManager(max_staleness=1, batch_groups=2)
    ids = _fill(mgr, "g", 4)
    assert mgr.capacity() == 0
    assert not mgr.try_submit("late", 0)
    assert not mgr.try_submit("late", 0)  # a refused id leaves no trace and may ask again
    assert mgr.stats()["refused"] == 2 and mgr.stats()["submitted"] == 4
    _learn(mgr, ids[:2])
    assert mgr.capacity() == 2
    assert mgr.try_submit("late", 1)
    assert mgr.stats()["running"] == 3


def test_filtered_groups_free_their_slot_for_a_waiting_producer() -> None:
    mgr = StalenessManager(max_staleness=0, batch_groups=1)
    (g,) = _fill(mgr, "g", 1)
    assert not mgr.try_submit("next", 0)
    mgr.on_filtered(g, "all_failed")
    assert mgr.try_submit("next", 0)


# ----------------------------------------------------------------------------------------------
# admission and staleness


def test_admission_boundary() -> None:
    mgr = StalenessManager(max_staleness=2, batch_groups=10)
    old = _fill(mgr, "v0-", 1)  # will be 3 versions behind
    mgr.set_version(1)
    edge = _fill(mgr, "v1-", 1)  # will be exactly 2 versions behind
    mgr.set_version(3)
    assert mgr.admissible(1) and mgr.admissible(3) and not mgr.admissible(0)
    for gid in old + edge:
        mgr.on_accepted(gid)
    assert mgr.stats()["max_buffered_staleness"] == 3
    with pytest.raises(ValueError, match="too stale for v3; call drop_stale"):
        mgr.on_consumed(old)
    assert mgr.drop_stale() == old
    assert mgr.drop_stale() == []
    mgr.on_consumed(edge)
    stats = mgr.stats()
    assert (stats["dropped_stale"], stats["consumed"], stats["buffered"]) == (1, 1, 0)


def test_submitting_with_a_stale_or_unpublished_version_is_an_error() -> None:
    mgr = StalenessManager(max_staleness=1, batch_groups=4)
    with pytest.raises(ValueError, match="v1 is not published yet"):
        mgr.try_submit("g", 1)
    mgr.set_version(3)
    assert mgr.try_submit("ok", 2)
    with pytest.raises(StaleVersionError, match="load a newer adapter"):
        mgr.try_submit("old", 1)
    assert mgr.stats()["submitted"] == 1


def test_synchronous_when_max_staleness_is_zero() -> None:
    mgr = StalenessManager(max_staleness=0, batch_groups=2)
    for v in range(3):
        ids = _fill(mgr, f"v{v}-", 2)
        assert mgr.capacity() == 0 and not mgr.try_submit("extra", v)
        _learn(mgr, ids)
    # the learner moved on while a group of the old policy was still generating: never trained on
    (slow,) = _fill(mgr, "slow", 1)
    mgr.set_version(4)
    mgr.on_accepted(slow)
    assert mgr.drop_stale() == [slow]
    with pytest.raises(StaleVersionError):
        mgr.try_submit("stale", 3)


def test_version_is_monotone() -> None:
    mgr = StalenessManager(max_staleness=1, batch_groups=1)
    mgr.set_version(3)
    mgr.set_version(3)  # re-announced on resume
    with pytest.raises(ValueError, match="only grow: got v2 after v3"):
        mgr.set_version(2)
    with pytest.raises(ValueError, match="version must be an integer >= 0"):
        mgr.set_version(-1)
    assert mgr.version == 3


# ----------------------------------------------------------------------------------------------
# protocol errors: ids and terminal transitions


def test_duplicate_ids_are_rejected_in_every_state() -> None:
    mgr = StalenessManager(max_staleness=1, batch_groups=4)
    run, acc, fil, fail, con = _fill(mgr, "g", 5)
    mgr.on_accepted(acc)
    mgr.on_accepted(con)
    mgr.on_consumed([con])
    mgr.on_filtered(fil, "zero_variance")
    mgr.on_failed(fail, "crash")
    expected = {
        run: "it is running",
        acc: "it is accepted and waiting",
        con: "it is already consumed",
        fil: r"it is already filtered \(zero_variance\)",
        fail: r"it is already failed \(crash\)",
    }
    for gid, where in expected.items():
        with pytest.raises(ValueError, match=f"duplicate group id '{gid}': {where}"):
            mgr.try_submit(gid, 0)
    with pytest.raises(ValueError, match="group_id must be a non-empty string"):
        mgr.try_submit("", 0)
    assert mgr.stats()["submitted"] == 5


@pytest.mark.parametrize("first", ["accepted", "filtered", "failed"])
@pytest.mark.parametrize("second", ["accepted", "filtered", "failed"])
def test_a_group_ends_only_once(first: str, second: str) -> None:
    mgr = StalenessManager(max_staleness=1, batch_groups=4)
    (g,) = _fill(mgr, "g", 1)
    finish = {
        "accepted": lambda: mgr.on_accepted(g),
        "filtered": lambda: mgr.on_filtered(g, "zero_variance"),
        "failed": lambda: mgr.on_failed(g, "crash"),
    }
    finish[first]()
    before = mgr.stats()
    with pytest.raises(ValueError, match="'g0' is not running: it is"):
        finish[second]()
    assert mgr.stats() == before


def test_unknown_ids_and_bad_reasons() -> None:
    mgr = StalenessManager(max_staleness=1, batch_groups=4)
    with pytest.raises(ValueError, match="'ghost' is not running: it was never submitted"):
        mgr.on_accepted("ghost")
    (g,) = _fill(mgr, "g", 1)
    with pytest.raises(ValueError, match="reason must be a non-empty string"):
        mgr.on_filtered(g, "")
    with pytest.raises(ValueError, match="'g0' cannot be consumed: it is running"):
        mgr.on_consumed([g])


def test_consumption_is_all_or_nothing_and_only_once() -> None:
    mgr = StalenessManager(max_staleness=1, batch_groups=4)
    a, b = _fill(mgr, "g", 2)
    mgr.on_accepted(a)
    mgr.on_accepted(b)
    before = mgr.stats()
    with pytest.raises(ValueError, match="names a group twice"):
        mgr.on_consumed([a, a])
    with pytest.raises(ValueError, match="'ghost' cannot be consumed: it was never submitted"):
        mgr.on_consumed([a, "ghost"])
    assert mgr.stats() == before
    mgr.on_consumed([a, b])
    with pytest.raises(ValueError, match="cannot be consumed: it is already consumed"):
        mgr.on_consumed([b])


# ----------------------------------------------------------------------------------------------
# checkpoint and resume


def _busy_manager() -> StalenessManager:
    """A manager in every state at once: consumed, dropped, filtered, failed, waiting, running."""
    mgr = StalenessManager(max_staleness=1, batch_groups=3)
    _learn(mgr, _fill(mgr, "a", 3))
    old, fil, fail = _fill(mgr, "b", 3)
    mgr.on_filtered(fil, "zero_variance")
    mgr.on_failed(fail, "crash")
    _learn(mgr, _fill(mgr, "c", 3))
    mgr.on_accepted(old)
    assert mgr.drop_stale() == []
    mgr.set_version(mgr.version + 1)
    assert mgr.drop_stale() == [old]
    waiting, _running = _fill(mgr, "d", 2)
    mgr.on_accepted(waiting)
    return mgr


def test_state_round_trip_through_json() -> None:
    mgr = _busy_manager()
    restored = StalenessManager(max_staleness=1, batch_groups=3)
    restored.load_state_dict(json.loads(json.dumps(mgr.state_dict())))
    assert restored.stats() == mgr.stats()
    assert restored.state_dict() == mgr.state_dict()
    with pytest.raises(ValueError, match="duplicate group id 'a0': it is already consumed"):
        restored.try_submit("a0", restored.version)
    restored.on_consumed(["d0"])  # acceptance order and versions survive
    restored.on_accepted("d1")


def test_rebase_after_restore_loses_running_groups_and_frees_their_slots() -> None:
    mgr = _busy_manager()
    restored = StalenessManager(max_staleness=1, batch_groups=3)
    restored.load_state_dict(json.loads(json.dumps(mgr.state_dict())))
    before = restored.stats()
    assert restored.rebase_after_restore() == ["d1"]
    after = restored.stats()
    assert after["running"] == 0 and after[f"failed/{LOST_ON_RESTART}"] == 1
    assert after["capacity"] == before["capacity"] + 1
    v = restored.version
    assert after["capacity"] == (1 + v + 1) * 3 - (after["accepted"] - after["dropped_stale"])
    assert after["buffered"] == 1  # accepted groups were persisted and survive
    with pytest.raises(ValueError, match=r"'d1' is not running: it is already failed \(lost_on_restart\)"):
        restored.on_accepted("d1")  # a late answer from the dead generator is refused
    assert restored.rebase_after_restore() == []
    restored.set_version(v)  # the learner re-announces its restored version


def test_load_rejects_other_settings_and_corrupt_books() -> None:
    state = _busy_manager().state_dict()
    with pytest.raises(ValueError, match="saved with max_staleness=1, this manager has 2"):
        StalenessManager(max_staleness=2, batch_groups=3).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with batch_groups=3, this manager has 4"):
        StalenessManager(max_staleness=1, batch_groups=4).load_state_dict(state)
    with pytest.raises(ValueError, match=r"ids in two states at once: \['d0'\]"):
        StalenessManager(1, 3).load_state_dict({**state, "done": {**state["done"], "d0": "consumed"}})
    with pytest.raises(AssertionError, match="submitted == accepted"):
        StalenessManager(1, 3).load_state_dict({**state, "submitted": state["submitted"] + 1})


def test_stats_break_reasons_down() -> None:
    mgr = _busy_manager()
    stats = mgr.stats()
    assert stats == {
        "version": 3, "capacity": 7, "submitted": 11, "running": 1, "accepted": 8, "buffered": 1,
        "consumed": 6, "dropped_stale": 1, "filtered": 1, "failed": 1, "refused": 0,
        "max_buffered_staleness": 0, "filtered/zero_variance": 1, "failed/crash": 1,
    }
    assert stats["capacity"] == (1 + 3 + 1) * 3 - (8 - 1 + 1)


# ----------------------------------------------------------------------------------------------
# randomized pipeline


def _simulate(
    seed: int, max_staleness: int, batch_groups: int, *, in_order: bool, lagging: bool, restarts: bool,
    target_version: int = 25,
) -> tuple[StalenessManager, Counter[str], list[int]]:
    """Producers and a learner interleaved by a seeded RNG, cross-checked against a shadow ledger.

    in_order: groups finish in submission order (else any running group may finish next).
    lagging: producers sometimes ask with an older version than the current one.
    restarts: now and then the manager is checkpointed through JSON, rebuilt and rebased.
    Returns the manager, the fate of every group, and the staleness of every consumed group.
    """
    rng = random.Random(seed)
    mgr = StalenessManager(max_staleness, batch_groups)
    fate: dict[str, str] = {}  # shadow ledger: id -> running / buffered / terminal state
    version_of: dict[str, int] = {}
    running: list[str] = []  # submission order
    buffered: list[str] = []  # acceptance order
    staleness: list[int] = []
    n_ids = 0
    for _ in range(100_000):
        if mgr.version >= target_version:
            break
        action = rng.choices(["submit", "finish", "learn", "restart"], [4, 4, 2, 0.05 if restarts else 0])[0]
        if action == "submit":
            v = mgr.version
            if lagging and rng.random() < 0.3:
                v = max(0, v - rng.randint(0, max_staleness + 1))
            gid = f"g{n_ids}"
            n_ids += 1
            live = sum(1 for f in fate.values() if f in ("running", "buffered", "consumed"))
            shadow_capacity = (max_staleness + mgr.version + 1) * batch_groups - live
            if mgr.version - v > max_staleness:
                with pytest.raises(StaleVersionError):
                    mgr.try_submit(gid, v)
            elif mgr.try_submit(gid, v):
                assert shadow_capacity >= 1
                fate[gid], version_of[gid] = "running", v
                running.append(gid)
            else:
                assert shadow_capacity < 1
        elif action == "finish" and running:
            gid = running.pop(0 if in_order else rng.randrange(len(running)))
            outcome = rng.choices(["accepted", "filtered", "failed"], [7, 2, 1])[0]
            if outcome == "accepted":
                mgr.on_accepted(gid)
                fate[gid] = "buffered"
                buffered.append(gid)
            elif outcome == "filtered":
                mgr.on_filtered(gid, rng.choice(["zero_variance", "all_failed"]))
                fate[gid] = "filtered"
            else:
                mgr.on_failed(gid, "crash")
                fate[gid] = "failed"
        elif action == "learn":
            dropped = mgr.drop_stale()
            assert dropped == [g for g in buffered if mgr.version - version_of[g] > max_staleness]
            for gid in dropped:
                fate[gid] = "dropped_stale"
                buffered.remove(gid)
            if len(buffered) >= batch_groups:
                batch, buffered = buffered[:batch_groups], buffered[batch_groups:]
                mgr.on_consumed(batch)
                staleness += [mgr.version - version_of[g] for g in batch]
                for gid in batch:
                    fate[gid] = "consumed"
                mgr.set_version(mgr.version + 1)
        elif action == "restart":
            mgr_state = json.loads(json.dumps(mgr.state_dict()))
            mgr = StalenessManager(max_staleness, batch_groups)
            mgr.load_state_dict(mgr_state)
            assert mgr.rebase_after_restore() == running
            for gid in running:
                fate[gid] = LOST_ON_RESTART
            running = []
        mgr.check_invariants()
        counts = Counter(fate.values())
        stats = mgr.stats()
        assert (stats["running"], stats["buffered"], stats["consumed"]) == (
            counts["running"], counts["buffered"], counts["consumed"])
        assert stats["capacity"] == (max_staleness + mgr.version + 1) * batch_groups - (
            counts["running"] + counts["buffered"] + counts["consumed"])
    assert mgr.version >= target_version, "the pipeline stalled"
    return mgr, Counter(fate.values()), staleness


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("max_staleness", "batch_groups"), [(0, 1), (1, 4), (3, 2)])
def test_randomized_pipeline_accounts_for_every_group(
    seed: int, max_staleness: int, batch_groups: int,
) -> None:
    mgr, fates, staleness = _simulate(
        seed, max_staleness, batch_groups, in_order=False, lagging=True, restarts=True)
    stats = mgr.stats()
    assert stats["submitted"] == sum(fates.values())  # every id has exactly one fate
    assert stats["accepted"] == fates["buffered"] + fates["consumed"] + fates["dropped_stale"]
    assert stats["filtered"] == fates["filtered"]
    assert stats["failed"] == fates["failed"] + fates[LOST_ON_RESTART]
    assert stats.get(f"failed/{LOST_ON_RESTART}", 0) == fates[LOST_ON_RESTART]
    assert stats["dropped_stale"] == fates["dropped_stale"]
    assert stats["consumed"] == len(staleness) == stats["version"] * batch_groups
    assert max(staleness) <= max_staleness


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("max_staleness", "batch_groups"), [(0, 1), (0, 3), (2, 4)])
def test_in_order_pipeline_never_needs_to_drop(seed: int, max_staleness: int, batch_groups: int) -> None:
    """With groups finishing in order, the capacity rule alone bounds staleness: nothing is dropped."""
    mgr, _, staleness = _simulate(
        seed, max_staleness, batch_groups, in_order=True, lagging=False, restarts=False)
    assert mgr.stats()["dropped_stale"] == 0
    assert max(staleness) <= max_staleness


def test_out_of_order_pipeline_does_drop_and_counts_it() -> None:
    """The drop path is exercised for real: slow groups overtaken by newer ones become stale."""
    dropped = sum(
        _simulate(seed, 1, 4, in_order=False, lagging=False, restarts=False)[0].stats()["dropped_stale"]
        for seed in range(6)
    )
    assert dropped > 0


def test_search_mode_may_publish_between_rounds_and_keeps_its_plain_bound() -> None:
    """selftrain publishes a version once a round's groups are consumed: the bound on work in flight
    is unchanged, the new version is admitted and a version beyond max_staleness is refused."""
    mgr = StalenessManager(1, 2, learner=False)
    for gid in ("a", "b"):
        assert mgr.try_submit(gid, 0)
        mgr.on_accepted(gid)
    mgr.on_consumed(["a", "b"])
    mgr.set_version(1)
    assert all(mgr.try_submit(f"r2-{i}", 1) for i in range(4)) and not mgr.try_submit("r2-4", 1)
    mgr.set_version(2)
    with pytest.raises(StaleVersionError):
        mgr.try_submit("late", 0)
    with pytest.raises(ValueError, match="only grow"):
        mgr.set_version(1)


def test_search_mode_bounds_work_in_flight_and_consuming_frees_slots() -> None:
    """Without a learner (rollout), version 0 forever: consuming is what frees capacity."""
    mgr = StalenessManager(1, 2, learner=False)
    ids = [f"g{i}" for i in range(4)]
    assert all(mgr.try_submit(gid, 0) for gid in ids)          # (1 + 1) * 2 = 4 in flight
    assert not mgr.try_submit("g4", 0)                          # backpressure, nothing recorded
    mgr.on_accepted("g0")
    mgr.on_filtered("g1", "zero_variance")                      # a filtered group frees its slot
    assert mgr.try_submit("g4", 0)
    assert not mgr.try_submit("g5", 0)
    mgr.on_consumed(["g0"])                                     # the consumer frees g0's slot
    assert mgr.try_submit("g5", 0)
    for _ in range(50):                                         # production never stalls for good
        gid = f"x{mgr.stats()['submitted']}"
        while not mgr.try_submit(gid, 0):
            waiting = next(iter(mgr.state_dict()["buffered"]), None)
            running = next(iter(mgr.state_dict()["running"]))
            if waiting is not None:
                mgr.on_consumed([waiting])
            else:
                mgr.on_accepted(running)
    stats = mgr.stats()
    assert stats["version"] == 0 and stats["running"] + stats["buffered"] <= 4


def test_search_mode_state_does_not_load_into_a_learner_manager() -> None:
    state = StalenessManager(1, 2, learner=False).state_dict()
    with pytest.raises(ValueError, match="learner"):
        StalenessManager(1, 2).load_state_dict(state)
    restored = StalenessManager(1, 2, learner=False)
    restored.load_state_dict(state)
    assert restored.capacity() == 4
