"""Compile pool, timer and replay buffer on a local CPU Ray cluster, with real builds and evaluations.

What must hold however actors die: every submitted candidate ends with exactly one Measurement
(retried once if its actor died mid-call, then recorded as failed), every group is accounted for
exactly once (submitted == accepted + filtered + failed + running), and backpressure holds producers
back instead of dropping anything. Actors are killed for real with `ray.kill`; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.exceptions import RayActorError  # noqa: E402

from rl_kernels.actors.buffer import ReplayBufferActor  # noqa: E402
from rl_kernels.actors.compiler import CompilerActor, build_or_fail  # noqa: E402
from rl_kernels.actors.timer import TIMER_FAILED, TimerActor, evaluate_or_fail, timer_options  # noqa: E402
from rl_kernels.config import EvalConfig  # noqa: E402
from rl_kernels.staleness import StaleVersionError  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402
from rl_kernels.trajectories import Group, Trajectory, read_groups, read_records  # noqa: E402
from rl_kernels.types import Measurement, Task  # noqa: E402

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
TASK = "hgemm/fp32/128_128_128"


def _source(kind: str) -> str:
    """A fresh copy of a candidate: the unique comment defeats the build cache, so builds take real time."""
    path = {"honest": CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp",
            "segfault": CANDIDATES / "sandbox" / "segfault.cpp"}[kind]
    return f"// {kind} {uuid.uuid4().hex}\n" + path.read_text()


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    ray.init(address="local", num_cpus=4, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def cfg(cpu_config: EvalConfig) -> EvalConfig:
    return cpu_config.model_copy(deep=True)


@pytest.fixture
def actors_to_kill() -> Any:
    """Actors a test created; killed for good afterwards so the next test can take the device."""
    handles: list[Any] = []
    yield handles
    for h in handles:
        ray.kill(h, no_restart=True)


async def _score(task: Task, source: str, compiler: Any, timer: Any, cfg: EvalConfig,
                 retries: dict[str, int]) -> Measurement:
    """One candidate through the compile pool and the timer; retry counts are recorded per stage."""
    ref, build, r_build = await build_or_fail(compiler, task, source)
    retries["build"] += r_build
    if ref is None or not build.ok:
        return Measurement(task=task.id, backend=cfg.backend, mode=cfg.timing.mode, rejected=build.reason,
                           detail=build.log[-2000:], reward=cfg.reward.fail_reward)
    m, r_eval = await evaluate_or_fail(timer, task, source, ref, cfg)
    retries["eval"] += r_eval
    return m


def _group(gid: str, task: Task, version: int, sources: list[str], ms: list[Measurement]) -> Group:
    trajs = [Trajectory(index=i, completion=f"```cpp\n{s}```", source=s, reward=m.reward, measurement=m)
             for i, (s, m) in enumerate(zip(sources, ms))]
    return Group(group_id=gid, task_id=task.id, policy_version=version, trajectories=trajs, backend="cpu")


def test_every_candidate_accounted_once_when_a_compiler_and_the_timer_die(
        ray_cluster: Any, cfg: EvalConfig, tmp_path: Path, actors_to_kill: list) -> None:
    task = get_task(TASK)
    buffer = ReplayBufferActor.remote(str(tmp_path), max_staleness=1, batch_groups=2)
    compilers = [CompilerActor.options(max_restarts=2, max_task_retries=0).remote(cfg) for _ in range(2)]
    timer = TimerActor.options(**timer_options(cfg, max_restarts=2)).remote(cfg)
    actors_to_kill.extend([buffer, *compilers, timer])
    ray.get([c.ready.remote() for c in compilers] + [timer.ready.remote()])

    plan = {"g0": ["honest", "honest"], "g1": ["honest", "segfault"], "g2": ["segfault", "segfault"]}
    sources = {gid: [_source(k) for k in kinds] for gid, kinds in plan.items()}
    retries = {"build": 0, "eval": 0}
    killed: dict[str, bool] = {}

    async def chaos(first_eval_done: asyncio.Event, evals_left: list[int]) -> None:
        # Compiler 0 has three uncached builds queued (~1 s each): kill it while they are in flight.
        await asyncio.sleep(0.5)
        ray.kill(compilers[0], no_restart=False)
        killed["compiler"] = True
        # Once the baseline is cached and one candidate is timed, kill the timer in the next one.
        await first_eval_done.wait()
        await asyncio.sleep(1.0)
        killed["timer_with_work_left"] = evals_left[0] > 0
        ray.kill(timer, no_restart=False)

    async def run() -> dict[str, list[Measurement]]:
        first_eval_done = asyncio.Event()
        evals_left = [sum(len(v) for v in plan.values())]

        async def one(i: int, source: str) -> Measurement:
            m = await _score(task, source, compilers[i % 2], timer, cfg, retries)
            evals_left[0] -= 1
            first_eval_done.set()
            return m

        for gid in plan:
            assert await buffer.request_slot.remote(gid, 0)
        chaos_task = asyncio.create_task(chaos(first_eval_done, evals_left))
        results: dict[str, list[Measurement]] = {}
        flat = [(gid, s) for gid in plan for s in sources[gid]]
        ms = await asyncio.gather(*(one(i, s) for i, (_, s) in enumerate(flat)))
        await chaos_task
        for gid in plan:
            results[gid] = [m for (g, _), m in zip(flat, ms) if g == gid]
        return results

    results = asyncio.run(run())
    assert killed == {"compiler": True, "timer_with_work_left": True}
    assert retries["build"] >= 1, "the compiler was killed with builds in flight: they must be retried"
    assert retries["eval"] >= 1, "the timer was killed mid-evaluation: the candidate must be retried"

    # Each candidate: exactly one real verdict (one retry was enough, nothing recorded as failed).
    # A build whose compiler was killed with the actor comes back as compile_interrupted, is never
    # cached, and is retried like an actor death, so honest kernels still end correct.
    for gid, kinds in plan.items():
        for kind, m in zip(kinds, results[gid]):
            if kind == "honest":
                assert m.correct and m.rejected is None, (m.rejected, m.detail[-1500:])
            else:
                assert m.rejected in ("crash", "compile_error"), m.detail[-1500:]

    statuses = {gid: ray.get(buffer.submit_group.remote(_group(gid, task, 0, sources[gid], results[gid])))
                for gid in plan}
    assert statuses["g2"] == "filtered/zero_variance"
    stats = ray.get(buffer.stats.remote())
    assert stats["submitted"] == 3 and stats["running"] == 0 and stats["failed"] == 0
    assert stats["accepted"] + stats["filtered"] == 3
    # the honest kernels, each a distinct source; never a crash
    assert stats["archived"] == sum(m.correct for ms in results.values() for m in ms) == 3
    batch = ray.get(buffer.get_batch.remote(stats["accepted"], 10.0))
    assert sorted(g.group_id for g in batch) == sorted(g for g, s in statuses.items() if s == "accepted")

    # On disk: every group exactly once, every candidate exactly once.
    persisted = list(read_groups(tmp_path))
    assert sorted(g.group_id for _, g in persisted) == ["g0", "g1", "g2"]
    on_disk = [t.source for _, g in persisted for t in g.trajectories]
    assert sorted(on_disk) == sorted(s for v in sources.values() for s in v)



def test_timer_that_dies_again_on_the_retry_records_timer_failed(
        ray_cluster: Any, cfg: EvalConfig, actors_to_kill: list) -> None:
    task = get_task(TASK)
    cfg.timing.samples = 800  # a long evaluation (~8 s on 2 cores), so both kills surely land mid-call
    compiler = CompilerActor.remote(cfg)
    timer = TimerActor.options(**timer_options(cfg, max_restarts=1)).remote(cfg)
    actors_to_kill.extend([compiler, timer])
    ray.get(timer.ready.remote())
    source = _source("honest")

    async def run() -> tuple[Measurement, int]:
        ref, build, _ = await build_or_fail(compiler, task, source)
        assert build.ok, build.log
        pending = asyncio.ensure_future(evaluate_or_fail(timer, task, source, ref, cfg))
        await asyncio.sleep(1.5)
        assert not pending.done(), "the evaluation must be in flight when the timer dies"
        first_pid = (await timer.stats.remote())["pid"]
        ray.kill(timer, no_restart=False)  # Ray restarts it once (max_restarts=1) ...
        while True:  # until the restarted process answers (the old one may still answer briefly)
            try:
                stats = await timer.stats.remote()
                if stats["pid"] != first_pid and stats["in_flight"]:  # restarted, and the retry runs
                    assert stats["restarted"]
                    break
            except RayActorError:  # unavailable while restarting
                pass
            assert not pending.done(), "the retry must start on the restarted timer"
            await asyncio.sleep(0.25)
        await asyncio.sleep(0.5)
        assert not pending.done(), "the retry must be in flight when the timer dies again"
        ray.kill(timer, no_restart=False)  # ... and not twice: the retry dies with it
        return await pending

    t0 = time.monotonic()
    m, retries_used = asyncio.run(run())
    assert retries_used == 1, m.detail
    assert m.rejected == TIMER_FAILED and m.reward == cfg.reward.fail_reward and not m.correct
    assert "timer died during 2 attempt(s)" in m.detail
    assert time.monotonic() - t0 < 60


def test_second_timer_on_the_same_device_fails_at_start(
        ray_cluster: Any, cfg: EvalConfig, actors_to_kill: list) -> None:
    first = TimerActor.options(**timer_options(cfg, max_restarts=0)).remote(cfg)
    actors_to_kill.append(first)
    ray.get(first.ready.remote())
    second = TimerActor.options(**timer_options(cfg, max_restarts=0)).remote(cfg, lock_timeout_s=0.5)
    actors_to_kill.append(second)
    with pytest.raises(RayActorError, match="already has a timer"):
        ray.get(second.ready.remote())


def test_backpressure_holds_the_producer_back_and_drops_nothing(
        ray_cluster: Any, cfg: EvalConfig, tmp_path: Path, actors_to_kill: list) -> None:
    """Fast producer, slow timer and learner: capacity 1 group, so the producer is refused and waits."""
    task = get_task(TASK)
    buffer = ReplayBufferActor.remote(str(tmp_path), max_staleness=0, batch_groups=1,
                                      filter_zero_variance=False)
    compiler = CompilerActor.remote(cfg)
    timer = TimerActor.options(**timer_options(cfg, max_restarts=0)).remote(cfg)
    actors_to_kill.extend([buffer, compiler, timer])
    ray.get([compiler.ready.remote(), timer.ready.remote()])
    n_groups = 3
    honest = _source("honest")  # one source: cached after the first build, so the timer is the bottleneck
    retries = {"build": 0, "eval": 0}
    refused = [0]
    max_buffered = [0]

    async def produce(i: int) -> str:
        gid = f"bp{i}"
        while True:
            version = (await buffer.stats.remote())["version"]
            try:
                if await buffer.request_slot.remote(gid, version):
                    break
                refused[0] += 1
            except StaleVersionError:  # the learner moved on between reading and asking: re-read
                pass
            await asyncio.sleep(0.1)
        m = await _score(task, honest, compiler, timer, cfg, retries)
        return await buffer.submit_group.remote(_group(gid, task, version, [honest], [m]))

    async def learn() -> list[str]:
        consumed: list[str] = []
        for version in range(1, n_groups + 1):
            batch = await buffer.get_batch.remote(1, 120.0)
            assert len(batch) == 1
            consumed += [g.group_id for g in batch]
            stats = await buffer.stats.remote()
            max_buffered[0] = max(max_buffered[0], stats["buffered"] + stats["running"])
            await asyncio.sleep(0.5)  # a slow learner step
            assert await buffer.set_version.remote(version) == []
        return consumed

    async def run() -> tuple[list[str], list[str]]:
        learner = asyncio.create_task(learn())
        statuses = await asyncio.gather(*(produce(i) for i in range(n_groups)))
        return statuses, await learner

    statuses, consumed = asyncio.run(run())
    assert statuses == ["accepted"] * n_groups
    assert sorted(consumed) == [f"bp{i}" for i in range(n_groups)]
    assert refused[0] > 0 and max_buffered[0] <= 1
    stats = ray.get(buffer.stats.remote())
    assert stats["refused"] == refused[0]
    assert (stats["submitted"], stats["accepted"], stats["consumed"], stats["dropped_stale"]) == (n_groups,) * 3 + (0,)
    assert len(list(read_groups(tmp_path))) == n_groups


def test_stale_groups_are_dropped_whole_and_counted(ray_cluster: Any, tmp_path: Path, actors_to_kill: list) -> None:
    buffer = ReplayBufferActor.remote(str(tmp_path), max_staleness=0, batch_groups=1)
    actors_to_kill.append(buffer)
    m = Measurement(task=TASK, backend="cpu", mode="kernel", rejected="crash")
    group = Group(group_id="old", task_id=TASK, policy_version=0, backend="cpu", trajectories=[
        Trajectory(index=i, completion="", source="x", reward=r, measurement=m) for i, r in enumerate([0.0, 0.5])])
    with pytest.raises(ValueError, match="no slot"):
        ray.get(buffer.submit_group.remote(group))
    assert ray.get(buffer.request_slot.remote("old", 0))
    assert ray.get(buffer.submit_group.remote(group)) == "accepted"
    assert ray.get(buffer.set_version.remote(1)) == ["old"]
    assert ray.get(buffer.get_batch.remote(1, 0.2)) == []
    stats = ray.get(buffer.stats.remote())
    assert (stats["accepted"], stats["dropped_stale"], stats["dropped_stale_trajectories"], stats["buffered"]) == (1, 1, 2, 0)
    events = [r.get("event") for r in read_records(tmp_path)]
    assert events == [None, "dropped_stale"]  # the group stays on disk; its drop is recorded
