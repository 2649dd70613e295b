"""ActorPool: requests wait in the driver, each actor takes `slots` at once."""

from __future__ import annotations

import asyncio

import pytest

from rl_kernels.cluster.pools import ActorPool


def test_each_actor_serves_its_slots_at_once_and_the_rest_wait() -> None:
    async def scenario() -> tuple[int, int, dict[str, int], float]:
        pool = ActorPool("generate", ["a", "b"], slots=2)
        peak, served = 0, {"a": 0, "b": 0}
        gate = asyncio.Event()

        async def request() -> None:
            nonlocal peak
            async with pool.use() as actor:
                served[actor] += 1
                peak = max(peak, pool.busy)
                await gate.wait()

        tasks = [asyncio.create_task(request()) for _ in range(6)]
        await asyncio.sleep(0.05)
        waiting = pool.waiting
        gate.set()
        await asyncio.gather(*tasks)
        return peak, waiting, served, pool.utilisation()

    peak, waiting, served, util = asyncio.run(scenario())
    assert (peak, waiting) == (4, 2)       # 4 at once (2 actors x 2 slots), 2 waiting in the driver
    assert served == {"a": 3, "b": 3}
    assert 0 < util <= 1


def test_a_pool_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        ActorPool("generate", ["a"], slots=0)
