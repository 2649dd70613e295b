"""Replay buffer actor: admission, persistence and batching of whole scored groups (DESIGN.md "Data flow").

Thin on purpose. It hosts three pure pieces, each tested without Ray:
- `StalenessManager`: producer-side slots (backpressure) and consumer-side staleness;
- `TrajectoryStore`: every scored group is fsynced to `run_dir/trajectories.jsonl` *before* it is
  counted as accepted, so nothing scored is lost on a crash;
- `KernelArchive`: verified kernels only (the archive's own gate decides), the exemplar database.

Backpressure, never drops: `request_slot` answers False when the staleness budget is spent and the
producer waits and asks again. The only groups that leave unconsumed are stale ones, dropped whole
and counted (`dropped_stale`), and zero-variance ones, filtered and counted; both stay in the file.

It is an async actor: every method runs on one event loop, so calls into the (not thread-safe)
manager are serialised by construction, while `get_batch` can wait for groups without blocking
producers. fsync and SQLite writes are short and run inline; they do block the loop for their
duration, which is what keeps "persisted before accepted" trivially true.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ray

from rl_kernels.archive import KernelArchive
from rl_kernels.buffer_restore import RESUMED, restore_buffer
from rl_kernels.staleness import StalenessManager
from rl_kernels.trajectories import Group, TrajectoryStore, read_records
from rl_kernels.types import Measurement

ZERO_VARIANCE = "zero_variance"


@ray.remote(max_concurrency=64)
class ReplayBufferActor:
    """The one buffer of a run. `batch_groups` = groups the learner consumes per published version."""

    def __init__(self, run_dir: str, max_staleness: int, batch_groups: int, *,
                 filter_zero_variance: bool = True, learner: bool = True) -> None:
        run = Path(run_dir)
        self.manager = StalenessManager(max_staleness, batch_groups, learner=learner)
        self.store = TrajectoryStore(run)
        self.archive = KernelArchive(run / "archive.sqlite")
        self.filter_zero_variance = filter_zero_variance
        self._slots: dict[str, int] = {}      # group id -> version its slot was granted for
        self._waiting: dict[str, Group] = {}  # accepted, not yet consumed, in acceptance order
        self._arrived = asyncio.Condition()
        self._counts = {"persisted_groups": 0, "persisted_trajectories": 0, "archived": 0,
                        "dropped_stale_trajectories": 0, "batches": 0}

    # ---- producers ------------------------------------------------------------------------------
    async def request_slot(self, group_id: str, version: int) -> bool:
        """Ask to generate one group with policy `version`. False = wait and ask again (same id).

        Raises StaleVersionError (wrapped by Ray) when `version` is already too old to be trained on.
        """
        granted = self.manager.try_submit(group_id, version)
        if granted:
            self._slots[group_id] = version
        return granted

    async def submit_group(self, group: Group) -> str:
        """Persist a scored group, archive its verified kernels, then accept or filter it.

        Returns the group's status ("accepted" or "filtered/<reason>").
        """
        if self._slots.get(group.group_id) != group.policy_version:
            raise ValueError(f"group {group.group_id!r} (v{group.policy_version}) has no slot for that "
                             f"version (slot: {self._slots.get(group.group_id)}); call request_slot first")
        filtered = self.filter_zero_variance and group.reward_std() == 0.0
        status = f"filtered/{ZERO_VARIANCE}" if filtered else "accepted"
        self.store.append_group(group, status)
        self._counts["persisted_groups"] += 1
        self._counts["persisted_trajectories"] += len(group.trajectories)
        for t in group.trajectories:
            if t.measurement is not None and t.source is not None:
                self._counts["archived"] += self.archive.add(
                    group.task_id, t.source, t.measurement, policy_version=group.policy_version,
                    backend=group.backend)
        del self._slots[group.group_id]
        if filtered:
            self.manager.on_filtered(group.group_id, ZERO_VARIANCE)
            return status
        self.manager.on_accepted(group.group_id)
        self._waiting[group.group_id] = group
        async with self._arrived:
            self._arrived.notify_all()
        return status

    async def archive_kernel(self, task_id: str, source: str, measurement: Measurement, policy_version: int,
                             backend: str) -> bool:
        """Archive a kernel measured outside any group (a task's seed); the archive's own gate
        decides (only kernels that passed every gate enter). True when it entered."""
        added = self.archive.add(task_id, source, measurement, policy_version=policy_version, backend=backend)
        self._counts["archived"] += added
        return bool(added)

    async def fail_group(self, group_id: str, reason: str) -> None:
        """A group that could not be produced at all (generator died): free its slot, count it."""
        self.manager.on_failed(group_id, reason)
        del self._slots[group_id]
        self.store.append({"event": "failed", "group_ids": [group_id], "reason": reason})

    # ---- learner --------------------------------------------------------------------------------
    async def set_version(self, version: int) -> list[str]:
        """The learner published `version`: groups now too stale are dropped whole; returns their ids."""
        self.manager.set_version(version)
        return self._drop_stale()

    async def get_batch(self, n_groups: int, timeout_s: float, step: int | None = None) -> list[Group]:
        """Up to `n_groups` admissible groups, oldest first; fewer (maybe none) if `timeout_s` passes.

        Stale groups are dropped (whole, counted) before choosing, so a batch never holds one.
        `step` is the learner step the groups are for; it is recorded with the consumption, so a
        resumed run knows which consumptions its checkpoint's weights include (buffer_restore.py).
        """
        async with self._arrived:
            try:
                await asyncio.wait_for(self._arrived.wait_for(lambda: len(self._waiting) >= n_groups), timeout_s)
            except asyncio.TimeoutError:
                pass
        self._drop_stale()
        ids = list(self._waiting)[:n_groups]
        self.manager.on_consumed(ids)
        if ids:
            self.store.append({"event": "consumed", "group_ids": ids, "version": self.manager.version,
                               "step": step})
            self._counts["batches"] += 1
        return [self._waiting.pop(gid) for gid in ids]

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _drop_stale(self) -> list[str]:
        stale = self.manager.drop_stale()
        for gid in stale:
            self._counts["dropped_stale_trajectories"] += len(self._waiting.pop(gid).trajectories)
        if stale:
            self.store.append({"event": "dropped_stale", "group_ids": stale, "version": self.manager.version})
        return stale

    async def stats(self) -> dict[str, Any]:
        """Counters for metrics; asserts the books balance (a failure here is a protocol bug)."""
        s = self.manager.stats()
        books = s["accepted"] + s["filtered"] + s["failed"] + s["running"]
        assert s["submitted"] == books, f"submitted {s['submitted']} != accepted+filtered+failed+running {books}"
        assert len(self._waiting) == s["buffered"] and len(self._slots) == s["running"], (s, len(self._waiting))
        return {**s, **self._counts}

    async def restore(self, step: int, version: int) -> dict[str, Any]:
        """Resume a training run from its checkpoint at learner `step`, policy `version`: rebuild the
        books and the waiting groups from trajectories.jsonl (rl_kernels/buffer_restore.py), record
        the resume, and drop what is stale at `version`. Returns the counters."""
        if self._slots or self._waiting or self.manager.stats()["submitted"]:
            raise RuntimeError("restore() must come before any group is submitted to this buffer")
        restored = restore_buffer(read_records(self.store.path), step=step, version=version,
                                  max_staleness=self.manager.max_staleness, batch_groups=self.manager.batch_groups)
        self.manager, self._waiting = restored.manager, restored.waiting
        self.store.append({"event": RESUMED, "step": step, "version": version, "requeued": restored.requeued})
        self._drop_stale()
        return {**self.manager.stats(), "requeued": len(restored.requeued)}

    async def state_dict(self) -> dict[str, Any]:
        """The staleness manager's state, for the learner's checkpoint (client state)."""
        return self.manager.state_dict()
