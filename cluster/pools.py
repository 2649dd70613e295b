"""Pools of interchangeable actors with the numbers the monitoring needs (queue depth, utilisation).

A pool hands out idle actors one request at a time: `async with pool.use() as actor:` waits until
one is free, so a pool of N compile actors runs N builds at once and everything else waits here,
in the driver, where the wait is visible (`waiting` is the pool's queue depth) and costs no actor
memory. Work is never pushed into an actor's mailbox ahead of time, so a dead actor takes at most
its one in-flight request with it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


class ActorPool:
    """`slots` requests per actor at once (an actor that batches concurrent requests, such as a vLLM
    generator, takes several); utilisation counts busy slots."""

    def __init__(self, name: str, actors: list[Any], slots: int = 1) -> None:
        if not actors:
            raise ValueError(f"pool {name!r} needs at least one actor")
        if slots < 1:
            raise ValueError(f"pool {name!r} needs at least one slot per actor, got {slots}")
        self.name = name
        self.actors = list(actors)
        self.slots = slots
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        for _ in range(slots):
            for actor in self.actors:
                self._idle.put_nowait(actor)
        self.waiting = 0             # requests queued for an actor now
        self.busy = 0                # actors working now
        self.requests = 0
        self._busy_s = 0.0           # finished busy time, summed over actors
        self._busy_since: dict[object, float] = {}   # one entry per request in progress
        self._started = time.monotonic()

    @asynccontextmanager
    async def use(self) -> AsyncIterator[Any]:
        self.waiting += 1
        try:
            actor = await self._idle.get()
        finally:
            self.waiting -= 1
        self.busy += 1
        self.requests += 1
        token = object()  # held until the request ends (an id() of a freed object is reused at once)
        self._busy_since[token] = time.monotonic()
        try:
            yield actor
        finally:
            self._busy_s += time.monotonic() - self._busy_since.pop(token)
            self.busy -= 1
            self._idle.put_nowait(actor)

    def busy_seconds(self) -> float:
        """Slot-seconds spent on requests so far, the running ones included."""
        now = time.monotonic()
        return self._busy_s + sum(now - t for t in self._busy_since.values())

    def utilisation(self) -> float:
        """Fraction of the pool's slot-time spent working since it was created."""
        elapsed = time.monotonic() - self._started
        return self.busy_seconds() / (len(self.actors) * self.slots * elapsed) if elapsed > 0 else 0.0
