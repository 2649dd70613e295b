"""PolicyVersions: the newest version, where each adapter lives, and announcing one to generators."""

from __future__ import annotations

import asyncio
from typing import Any

from rl_kernels.cluster.versions import PolicyVersions


class Generator:
    """A generator handle's `load_adapter.remote`, recording calls; `dead` ones raise like a dead actor."""

    def __init__(self, dead: bool = False, delay: float = 0.0) -> None:
        self.loaded: list[tuple[int, str]] = []
        self.dead, self.delay = dead, delay
        self.load_adapter = self

    def remote(self, version: int, path: str) -> Any:
        async def call() -> list[int]:
            await asyncio.sleep(self.delay)
            if self.dead:
                raise RuntimeError("the actor died")
            self.loaded.append((version, path))
            return [v for v, _ in self.loaded]
        return call()


def test_the_newest_version_and_the_paths_kept() -> None:
    versions = PolicyVersions(keep=3)
    assert versions.current == 0 and versions.path(0) is None
    for v in range(1, 6):
        versions.publish(v, f"/run/adapters/policy-v{v}")
    assert versions.current == 5
    assert [versions.path(v) for v in range(1, 6)] == [None, None, "/run/adapters/policy-v3",
                                                       "/run/adapters/policy-v4", "/run/adapters/policy-v5"]


def test_announce_reaches_every_live_generator_and_times_the_sync() -> None:
    async def scenario() -> tuple[list[Generator], PolicyVersions]:
        gens = [Generator(), Generator(dead=True), Generator(delay=0.05)]
        versions = PolicyVersions(keep=3)
        versions.publish(1, "/a/v1")
        await versions.announce(gens, 1)            # a dead generator does not fail the announce
        versions.publish(2, "/a/v2")
        versions.announce_in_background(gens, 2)
        await versions.settle()
        return gens, versions

    gens, versions = asyncio.run(scenario())
    assert gens[0].loaded == gens[2].loaded == [(1, "/a/v1"), (2, "/a/v2")] and gens[1].loaded == []
    assert len(versions.sync_s) == 2 and versions.sync_s[0] >= 0.05 and versions.sync_median_s() is not None
