"""`rl-kernels rollout`: search without learning. The policy's groups are scored, persisted and their
verified kernels archived; nothing is trained.

Without a learner the buffer runs in search mode: this stage takes what it accepts off it (the
groups are persisted already), so the run is bounded by `rollout.max_groups` /
`rollout.time_budget_s`, not by staleness.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from rl_kernels.cluster.driver import RunContext
from rl_kernels.rollout import TaskCycle
from rl_kernels.trajectories import Group
from rl_kernels.types import Task

SUMMARY = "rollout_summary.json"


class SearchStage:
    LEARNER = False
    SUMMARY = SUMMARY
    BAR = True

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cycle = TaskCycle(ctx.tasks, ctx.rng)
        budget = ctx.cfg.rollout.time_budget_s
        self.deadline = ctx.t0 + budget if budget else None

    async def start(self) -> None:
        """Nothing to resume: the archive and trajectories.jsonl are appended to."""

    async def tasks(self) -> AsyncIterator[Task]:
        while not self.stopped():
            yield self.cycle.next()

    def stopped(self) -> bool:
        return production_ended(self.ctx, self.deadline)

    async def consume(self, stop: asyncio.Event) -> None:
        await drain(self.ctx, stop)

    def on_group(self, group: Group | None) -> None:
        """Counted by the producer; nothing more to do."""

    def metrics_step(self) -> int:
        return self.ctx.producer.tally.groups

    async def summary(self, base: dict[str, Any]) -> dict[str, Any]:
        return base


def production_ended(ctx: RunContext, deadline: float | None) -> bool:
    """A bug in a group, `rollout.max_groups` groups started, or the rollout's time budget spent."""
    producer, limit = ctx.producer, ctx.cfg.rollout.max_groups
    if producer.errors:
        return True
    if limit is not None and producer.submitted >= limit:
        return True
    return deadline is not None and time.monotonic() >= deadline


async def drain(ctx: RunContext, stop: asyncio.Event) -> None:
    """Take accepted groups off a search-mode buffer (persisted already), which frees their slots."""
    n = ctx.cfg.rollout.batch_groups
    while True:
        batch = await ctx.graph.buffer.get_batch.remote(n, 0.5)
        if stop.is_set() and not batch:
            return
