"""Staleness control for asynchronous RL: how many groups the generators may have in flight.

The learner trains on groups sampled from older policies. To bound how old, a generator asks for a
slot before it generates a group, and the learner's progress (its published policy version) frees
slots. This is the AReaL / SkyRL rule:

    capacity = (max_staleness + version + 1) * batch_groups - (accepted + running)

`batch_groups` is the number of groups the learner consumes per published version, so by version v
it has used v * batch_groups groups and at most (max_staleness + 1) * batch_groups more can be
waiting or in generation. If groups finish in the order they started and the learner takes them
first in, first out, that alone keeps every group within max_staleness versions of the learner
(tests/unit/test_staleness.py checks it). Groups do not always finish in order (a slow group is
overtaken by newer ones), so a group that is too old when the learner gets to it is dropped whole by
`drop_stale`, counted, and its slot is given back: `accepted` above counts the groups the learner
consumed or still can, not the dropped ones. Otherwise every drop would shrink the budget for good
and a long run would starve its own learner. Bookkeeping grows by one small entry per group id
ever submitted (so that ids are never reused, even across a resume).

Every group id lives exactly one life; the id is never reused:

    try_submit -> running -> accepted -> consumed
                                      -> dropped_stale
                          -> filtered(reason)   scored but useless to the learner (zero variance, ...)
                          -> failed(reason)     never scored (a crash; lost_on_restart after a resume)

Search mode (`learner=False`, `rl-kernels rollout` and `selftrain`): no learner consumes a batch per
version, so the rule above would stop production for good after (max_staleness + 1) * batch_groups
groups. There the budget is a plain bound on work in flight: groups running or
accepted-and-not-yet-consumed, (max_staleness + 1) * batch_groups of them at most; the consumer
(the driver) frees slots by consuming. The version stays 0 in `rollout`; `selftrain` publishes one
between rounds, when nothing is in flight.

The books (submitted == accepted + filtered + failed + running, and accepted == consumed +
dropped_stale + buffered) are checked after every mutation. The object is pure: no threads, no I/O.
It is not thread-safe; its owner (the replay buffer actor) serialises calls, which an async actor
does by construction and a threaded one must do with a lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

LOST_ON_RESTART = "lost_on_restart"


class StaleVersionError(ValueError):
    """A generator asked for a slot with a policy version the learner would already reject.

    Waiting cannot help (versions only grow), so this is an error rather than backpressure: the
    generator should load a newer adapter and ask again.
    """


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_reason(reason: object) -> None:
    if not isinstance(reason, str) or not reason:
        raise ValueError(f"reason must be a non-empty string, got {reason!r}")


class StalenessManager:
    """Producer-side admission (slots, backpressure) and consumer-side staleness for whole groups."""

    def __init__(self, max_staleness: int, batch_groups: int, *, learner: bool = True) -> None:
        self.max_staleness = _check_int("max_staleness", max_staleness, 0)
        self.batch_groups = _check_int("batch_groups", batch_groups, 1)
        self.learner = learner
        self._version = 0
        self._running: dict[str, int] = {}  # id -> policy version it is generated with
        self._buffered: dict[str, int] = {}  # id -> version, accepted and waiting, in acceptance order
        self._done: dict[str, str] = {}  # id -> terminal state; kept so that an id is never reused
        self._submitted = 0
        self._accepted = 0
        self._consumed = 0
        self._dropped_stale = 0
        self._refused = 0  # try_submit answered False: how often generators were held back
        self._filtered: Counter[str] = Counter()
        self._failed: Counter[str] = Counter()

    @property
    def version(self) -> int:
        """The latest policy version the learner has published."""
        return self._version

    def capacity(self) -> int:
        """How many more groups may start now; never negative (a slot is taken only when >= 1)."""
        return max(0, self._budget_left())

    def _budget_left(self) -> int:
        """The rule above; negative only after a resume re-queued groups consumed by lost steps (the
        producers then wait until the learner has caught up)."""
        if not self.learner:
            return (self.max_staleness + 1) * self.batch_groups - (len(self._buffered) + len(self._running))
        budget = (self.max_staleness + self._version + 1) * self.batch_groups
        return budget - (self._accepted - self._dropped_stale + len(self._running))

    def admissible(self, group_version: int) -> bool:
        """Whether a group sampled with `group_version` may still be trained on now."""
        return self._version - group_version <= self.max_staleness

    # ------------------------------------------------------------------------------------------
    # producer side

    def try_submit(self, group_id: str, version: int) -> bool:
        """Take a slot for a group about to be generated with policy `version`.

        False is backpressure: the caller waits and asks again (same id is fine), nothing is
        recorded and nothing is dropped. A version the learner has not published yet is a bug
        (ValueError); one that is already too stale raises StaleVersionError.
        """
        self._check_new(group_id)
        _check_int("version", version, 0)
        if version > self._version:
            raise ValueError(
                f"group {group_id!r}: policy v{version} is not published yet (current v{self._version})"
            )
        if not self.admissible(version):
            raise StaleVersionError(
                f"group {group_id!r}: policy v{version} is more than max_staleness={self.max_staleness} "
                f"versions behind v{self._version}; load a newer adapter"
            )
        admitted = self.capacity() >= 1
        if admitted:
            self._running[group_id] = version
            self._submitted += 1
        else:
            self._refused += 1
        self.check_invariants()
        return admitted

    def on_accepted(self, group_id: str) -> None:
        """The group was scored and is usable: it waits for the learner.

        Call it once the group's trajectories are persisted, so that an accepted group survives a
        crash (only running groups are lost on restart).
        """
        self._buffered[group_id] = self._take_running(group_id)
        self._accepted += 1
        self.check_invariants()

    def on_filtered(self, group_id: str, reason: str) -> None:
        """The group was scored but teaches nothing (e.g. zero reward variance); its slot is freed."""
        self._end_running(group_id, "filtered", reason, self._filtered)

    def on_failed(self, group_id: str, reason: str) -> None:
        """The group could not be produced at all (generator crash, ...); its slot is freed."""
        self._end_running(group_id, "failed", reason, self._failed)

    def _end_running(self, group_id: str, state: str, reason: str, counter: Counter[str]) -> None:
        """A running group ends without entering the buffer: recorded, counted by reason."""
        _check_reason(reason)
        self._take_running(group_id)
        self._done[group_id] = f"{state} ({reason})"
        counter[reason] += 1
        self.check_invariants()

    # ------------------------------------------------------------------------------------------
    # consumer side

    def drop_stale(self) -> list[str]:
        """Drop every waiting group the learner may no longer train on; returns their ids.

        The caller deletes those groups' trajectories. Run it after `set_version` and before
        sampling a batch: `on_consumed` refuses stale groups.
        """
        stale = [gid for gid, v in self._buffered.items() if not self.admissible(v)]
        for gid in stale:
            del self._buffered[gid]
            self._done[gid] = "dropped_stale"
        self._dropped_stale += len(stale)
        self.check_invariants()
        return stale

    def on_consumed(self, group_ids: Iterable[str]) -> None:
        """The learner took these groups for a step. All or nothing: a bad id changes nothing."""
        ids = list(group_ids)
        if len(set(ids)) != len(ids):
            twice = sorted(gid for gid, n in Counter(ids).items() if n > 1)
            raise ValueError(f"a batch names a group twice: {twice}")
        for gid in ids:
            if gid not in self._buffered:
                raise ValueError(f"group {gid!r} cannot be consumed: {self._where(gid)}")
            if not self.admissible(self._buffered[gid]):
                raise ValueError(
                    f"group {gid!r} (v{self._buffered[gid]}) is too stale for v{self._version}; "
                    "call drop_stale() before sampling a batch"
                )
        for gid in ids:
            del self._buffered[gid]
            self._done[gid] = "consumed"
        self._consumed += len(ids)
        self.check_invariants()

    def set_version(self, version: int) -> None:
        """The learner published `version`. Re-announcing the current one (on resume) is a no-op."""
        _check_int("version", version, 0)
        if version < self._version:
            raise ValueError(f"policy versions only grow: got v{version} after v{self._version}")
        self._version = version
        self.check_invariants()

    # ------------------------------------------------------------------------------------------
    # bookkeeping

    def check_invariants(self) -> None:
        """Raise AssertionError when the books do not balance: a bug here or in the caller's protocol."""
        n_filtered, n_failed = sum(self._filtered.values()), sum(self._failed.values())
        checks = {
            "submitted == accepted + filtered + failed + running":
                self._submitted == self._accepted + n_filtered + n_failed + len(self._running),
            "accepted == consumed + dropped_stale + buffered":
                self._accepted == self._consumed + self._dropped_stale + len(self._buffered),
            "each submitted id is tracked exactly once":
                self._submitted == len(self._running) + len(self._buffered) + len(self._done),
            "running groups fit the budget": self._budget_left() >= 0 or not self._running,
        }
        broken = [name for name, ok in checks.items() if not ok]
        if broken:
            raise AssertionError(f"staleness books broken: {broken}; {self.stats()}")

    def stats(self) -> dict[str, int]:
        """Counters for metrics; `filtered/<reason>` and `failed/<reason>` break the totals down."""
        return {
            "version": self._version,
            "capacity": self.capacity(),
            "submitted": self._submitted,
            "running": len(self._running),
            "accepted": self._accepted,
            "buffered": len(self._buffered),
            "consumed": self._consumed,
            "dropped_stale": self._dropped_stale,
            "filtered": sum(self._filtered.values()),
            "failed": sum(self._failed.values()),
            "refused": self._refused,
            "max_buffered_staleness": max((self._version - v for v in self._buffered.values()), default=0),
            **{f"filtered/{reason}": n for reason, n in sorted(self._filtered.items())},
            **{f"failed/{reason}": n for reason, n in sorted(self._failed.items())},
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as plain JSON-able values (for the learner's client state)."""
        return {
            "max_staleness": self.max_staleness,
            "batch_groups": self.batch_groups,
            "learner": self.learner,
            "version": self._version,
            "running": dict(self._running),
            "buffered": dict(self._buffered),
            "done": dict(self._done),
            "submitted": self._submitted,
            "accepted": self._accepted,
            "consumed": self._consumed,
            "dropped_stale": self._dropped_stale,
            "refused": self._refused,
            "filtered": dict(self._filtered),
            "failed": dict(self._failed),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict`; call `rebase_after_restore` next when resuming after a crash.

        max_staleness and batch_groups must match: the budget already handed out was computed with
        them, so changing them mid-run would make the capacity meaningless.
        """
        for key in ("max_staleness", "batch_groups", "learner"):
            if state.get(key, True) != getattr(self, key):
                raise ValueError(
                    f"checkpoint was saved with {key}={state[key]}, this manager has {getattr(self, key)}"
                )
        running, buffered, done = dict(state["running"]), dict(state["buffered"]), dict(state["done"])
        shared = (running.keys() & buffered.keys()) | (done.keys() & (running.keys() | buffered.keys()))
        if shared:
            raise ValueError(f"corrupt staleness state: ids in two states at once: {sorted(shared)}")
        self._version = _check_int("version", state["version"], 0)
        self._running, self._buffered, self._done = running, buffered, done
        self._submitted, self._accepted = state["submitted"], state["accepted"]
        self._consumed, self._dropped_stale = state["consumed"], state["dropped_stale"]
        self._refused = state["refused"]
        self._filtered, self._failed = Counter(state["filtered"]), Counter(state["failed"])
        self.check_invariants()

    def rebase_after_restore(self) -> list[str]:
        """Mark the groups that were running at the checkpoint as failed (lost_on_restart).

        They are not re-queued: the work behind them (sampled tokens, builds) died with the old
        processes, and re-running a group under its old id would make one id name two generations.
        Generators simply submit fresh groups; the freed slots make the capacity right for the
        restored version. Accepted groups are kept (they were persisted before `on_accepted`).
        Returns the lost ids.
        """
        lost = list(self._running)
        for gid in lost:
            self.on_failed(gid, LOST_ON_RESTART)
        return lost

    def _check_new(self, group_id: str) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError(f"group_id must be a non-empty string, got {group_id!r}")
        if group_id in self._running or group_id in self._buffered or group_id in self._done:
            raise ValueError(f"duplicate group id {group_id!r}: {self._where(group_id)}")

    def _take_running(self, group_id: str) -> int:
        """Remove a running group (returning its version); anything else is a protocol error."""
        if group_id not in self._running:
            raise ValueError(f"group {group_id!r} is not running: {self._where(group_id)}")
        return self._running.pop(group_id)

    def _where(self, group_id: str) -> str:
        if group_id in self._running:
            return "it is running"
        if group_id in self._buffered:
            return "it is accepted and waiting for the learner"
        if group_id in self._done:
            return f"it is already {self._done[group_id]}"
        return "it was never submitted"
