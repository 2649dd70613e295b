"""The policy versions a run samples with: the newest one, where each adapter lives, and its delivery.

New groups are sampled with `current`; a generator that lacks a version (restarted, or an announce
still in flight) loads it from `path(version)` on first use. Announcing a version asks every
generator to load it now; the time until all of them have is the weight sync.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from rl_kernels.policy import BASE_VERSION


class PolicyVersions:
    """Books of published versions; `keep` versions below the newest stay addressable (the oldest a
    staleness-bounded request may still use: max_staleness + 2)."""

    def __init__(self, keep: int) -> None:
        self.current = BASE_VERSION
        self.keep = keep
        self._paths: dict[int, str] = {}
        self.sync_s: list[float] = []          # seconds per announce until every generator had it
        self._announcing: set[asyncio.Task[None]] = set()

    def path(self, version: int) -> str | None:
        """The adapter directory of `version`; None for the base model (or a version long gone)."""
        return self._paths.get(version)

    def publish(self, version: int, path: str | Path) -> None:
        """`version` is the newest: new groups sample with it."""
        self.current = version
        self._paths[version] = str(path)
        for old in [v for v in self._paths if v <= version - self.keep]:
            del self._paths[old]

    async def announce(self, generators: list[Any], version: int) -> None:
        """Every generator loads `version` now (a dead generator reloads it on its next request)."""
        t0 = time.monotonic()
        await asyncio.gather(*(g.load_adapter.remote(version, self._paths[version]) for g in generators),
                             return_exceptions=True)
        self.sync_s.append(time.monotonic() - t0)

    def announce_in_background(self, generators: list[Any], version: int) -> None:
        """`announce` without waiting for it (the learner goes on training); `settle` waits."""
        task = asyncio.create_task(self.announce(generators, version))
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    async def settle(self) -> None:
        """Wait for announces still in flight."""
        if self._announcing:
            await asyncio.gather(*self._announcing)

    def sync_median_s(self) -> float | None:
        return statistics.median(self.sync_s) if self.sync_s else None
