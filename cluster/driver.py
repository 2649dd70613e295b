"""One driver for `rl-kernels rollout`, `selftrain` and `train`: components wired in `setup`, driven
by `main_loop`.

The components (none of them knows the driver):
- graph (cluster/graph.py): the actors, placed by one plan: the replay buffer, the generator,
  compile and timer pools, and in train mode the learner.
- sink (rl_kernels/metrics.py): W&B and metrics.jsonl.
- archive (rl_kernels/archive.py): every verified kernel; the contrastive prompts' exemplars.
- versions (cluster/versions.py): the newest policy version and where each adapter lives.
- producer (cluster/producer.py): one scored group at a time: slot, prompt, generator, compile
  pool, timer, buffer; the seeds' measurements; the pipeline's counters.
- stage: what the run is for, and so what to sample next and what to do with accepted groups:
  `SearchStage` (rollout, cluster/search.py: keep the best kernels), `LearnStage` (train,
  cluster/train.py: the GRPO learner loop), `RoundsStage` (selftrain, cluster/selftrain.py:
  sample a round, fine-tune on its verified samples).

    main_loop:
        status (beside everything below)      a status line whenever nothing was printed for a while
        stage.start()                         resume: learner checkpoint + buffer, or committed rounds
        producer.seed_archive(tasks)          the seed kernels, measured once
        stage.consume(stop)  |  ticker        concurrently: the stage's consumer, metrics every interval
        for task in stage.tasks():            the stage says what to sample next and when to stop
            version = producer.slot(...)      backpressure: wait for the buffer, never drop
            spawn producer.group(...) -> stage.on_group(group)
        wait for the groups in flight, stop the consumer and the ticker, the summary

A bug in a group's handling is kept (the group failed as `driver_error`) and re-raised after the
other groups finished and the summary was written.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import ray
from ray.exceptions import RayActorError

from rl_kernels.archive import KernelArchive
from rl_kernels.cluster.graph import ProducerGraph, build_graph, kill_graph, start_ray
from rl_kernels.cluster.producer import GroupProducer
from rl_kernels.cluster.status import Console, status_line
from rl_kernels.cluster.versions import PolicyVersions
from rl_kernels.config import Config, ConfigError, dump_config
from rl_kernels.metrics import MetricsSink, group_metrics
from rl_kernels.run_dir import CONFIG_FILE
from rl_kernels.tasks import load_suite
from rl_kernels.tasks.split import task_split
from rl_kernels.trajectories import FILENAME as TRAJECTORIES, Group
from rl_kernels.types import Task


class RunDirError(RuntimeError):
    """The run directory holds an earlier run and --resume was not given."""


def select_tasks(cfg: Config) -> list[Task]:
    """The suite's training tasks (held-out ones never get a training prompt), or `rollout.tasks`."""
    split = task_split(cfg.split)
    tasks = load_suite(cfg.suite)
    if cfg.rollout.tasks is None:
        train = split.train(tasks)
        if not train:
            raise ConfigError(f"every task of suite {cfg.suite!r} is held out (split.*): nothing to train on")
        return train
    by_id = {t.id: t for t in tasks}
    unknown = [t for t in cfg.rollout.tasks if t not in by_id]
    if unknown:
        raise ValueError(f"rollout.tasks names tasks not in suite {cfg.suite!r}: {unknown}")
    split.refuse_heldout(cfg.rollout.tasks, "rollout.tasks")
    return [by_id[t] for t in cfg.rollout.tasks]


def refuse_earlier_run(run: Path, resume: bool) -> None:
    """A new run never writes into the directory of an earlier one (its files would mix with the
    earlier run's); `train` asks before it places a warm start there, the driver before it starts."""
    if (run / TRAJECTORIES).exists() and not resume:
        raise RunDirError(f"{run} already holds a run ({TRAJECTORIES}); pass --resume to continue it "
                          f"(archive and trajectories are appended to) or set run_dir=... for a new one")


def prepare_run_dir(cfg: Config, resume: bool) -> Path:
    run = Path(cfg.run_dir)
    refuse_earlier_run(run, resume)
    run.mkdir(parents=True, exist_ok=True)
    (run / CONFIG_FILE).write_text(dump_config(cfg))
    return run


@dataclass(frozen=True)
class RunContext:
    """What a stage works with, wired by `Driver.setup`."""

    cfg: Config
    run_dir: Path
    resume: bool
    tasks: list[Task]
    graph: ProducerGraph
    sink: MetricsSink
    archive: KernelArchive
    versions: PolicyVersions
    producer: GroupProducer
    rng: random.Random                  # the run's draws (task order, prompts, sampling seeds); checkpointed
    t0: float                           # when production started (monotonic seconds)
    say: Callable[[str], None]          # progress lines (silent without progress)


class Stage(Protocol):
    """What a run is for. A stage is built by `Driver.setup` from the RunContext."""

    LEARNER: bool        # the graph has a learner actor (the buffer then bounds staleness)
    SUMMARY: str         # the summary file in the run directory
    BAR: bool            # a progress bar over groups (else each group prints a line)

    async def start(self) -> None:
        """Before production: resume what the run directory holds."""

    def tasks(self) -> AsyncIterator[Task]:
        """The next task to sample a group of, until the stage is done."""

    def stopped(self) -> bool:
        """True once no new group should be started (checked while waiting for a slot)."""

    async def consume(self, stop: asyncio.Event) -> None:
        """Take accepted groups off the buffer until `stop` is set and nothing is left."""

    def on_group(self, group: Group | None) -> None:
        """A group finished (None: it failed)."""

    def metrics_step(self) -> int:
        """The x axis of this stage's metrics."""

    async def summary(self, base: dict[str, Any]) -> dict[str, Any]:
        """The run's summary: the pipeline's `base` and the stage's own figures."""


class Driver:
    """Runs one stage on the pipeline. `graph` is the running actors once `setup` started them (tests
    kill some to exercise restarts)."""

    def __init__(self, stage: type[Stage], cfg: Config, *, resume: bool = False, progress: bool = True) -> None:
        self.cfg, self.stage_type, self.resume, self.progress = cfg, stage, resume, progress
        self.run_dir = prepare_run_dir(cfg, resume)
        self.tasks = select_tasks(cfg)
        self.graph: ProducerGraph | None = None
        self.ctx: RunContext | None = None     # the components, wired by setup
        self.stage: Stage | None = None
        self.bar: Any = None
        self.console = Console(progress)

    def run(self) -> dict[str, Any]:
        started_ray = start_ray(self.cfg, learner=self.stage_type.LEARNER)
        try:
            return asyncio.run(self._run())
        finally:
            if started_ray:
                ray.shutdown()

    async def _run(self) -> dict[str, Any]:
        try:
            await self.setup()
            summary = await self.main_loop()
        finally:
            self.teardown()
        (self.run_dir / self.stage_type.SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
        errors = self._wired()[0].producer.errors
        if errors:
            raise errors[0]
        return summary

    async def setup(self) -> None:
        """The actors, then every component on top of them."""
        cfg = self.cfg
        self.graph = await build_graph(cfg, learner=self.stage_type.LEARNER, say=self.console.say)
        sink = MetricsSink(self.run_dir, cfg.metrics, run_config=cfg.model_dump(mode="json"),
                           name=self.run_dir.name, resume=self.resume)
        self.bar = _progress_bar(cfg) if self.progress and self.stage_type.BAR else None
        archive = KernelArchive(self.run_dir / "archive.sqlite")
        versions = PolicyVersions(keep=cfg.rollout.max_staleness + 2)
        rng = random.Random(cfg.rollout.seed)
        producer = GroupProducer(cfg, self.graph, archive, versions, rng, self.bar, self.console)
        self.ctx = RunContext(cfg, self.run_dir, self.resume, self.tasks, self.graph, sink, archive, versions,
                              producer, rng, time.monotonic(), self.console.say)
        self.stage = self.stage_type(self.ctx)   # type: ignore[call-arg]

    async def main_loop(self) -> dict[str, Any]:
        ctx, stage = self._wired()
        producer = ctx.producer
        stop = asyncio.Event()
        status = asyncio.create_task(self._status(stop))
        await stage.start()
        await producer.seed_archive(self.tasks)
        consumer = asyncio.create_task(stage.consume(stop))
        ticker = asyncio.create_task(self._tick(stop))
        for side in (ticker, status):
            side.add_done_callback(self._said_when_failed)
        in_flight: set[asyncio.Task[None]] = set()
        async for task in stage.tasks():
            gid = producer.next_id()
            version = await producer.slot(gid, stage.stopped)
            if version is None:
                break
            job = asyncio.create_task(self._group(gid, version, task))
            in_flight.add(job)
            job.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.gather(*in_flight)
        stop.set()
        await consumer
        await asyncio.wait((ticker, status))    # a failure was said (`_said_when_failed`); raised after the summary
        producer.errors += [exc for exc in map(_failure, (ticker, status)) if exc is not None]
        buf = await ctx.graph.buffer.stats.remote()
        summary = await stage.summary(await self._base_summary(buf))
        ctx.sink.log(producer.gauges(buf, time.monotonic() - ctx.t0) | group_metrics(producer.take_recent()),
                     step=stage.metrics_step())
        return summary

    def teardown(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.ctx is not None:
            self.ctx.sink.close()
        if self.graph is not None:
            kill_graph(self.graph)

    def _wired(self) -> tuple[RunContext, Stage]:
        if self.ctx is None or self.stage is None:
            raise RuntimeError("the driver is not set up (setup() first)")
        return self.ctx, self.stage

    def _said_when_failed(self, task: asyncio.Task[None]) -> None:
        """A background loop (metrics records, status lines) that stopped on an error is a bug: said
        at once, since the run goes on without it, and raised once the run's summary is written."""
        exc = _failure(task)
        if exc is not None:
            self.console.say(f"{task.get_coro().__qualname__} stopped: {exc!r}; "
                             "the run goes on without it and raises the error at its end")

    async def _group(self, gid: str, version: int, task: Task) -> None:
        ctx, stage = self._wired()
        stage.on_group(await ctx.producer.group(gid, version, task))

    async def _tick(self, stop: asyncio.Event) -> None:
        """A metrics record every `metrics.interval_s`: the pipeline's gauges, the generators' adapter
        delivery checks and the groups finished since the last record."""
        ctx, stage = self._wired()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.cfg.metrics.interval_s)
            except asyncio.TimeoutError:
                pass
            if stop.is_set():
                return
            recent = ctx.producer.take_recent()
            gens = await answering_stats(ctx.graph.generators.actors)
            buf = await ctx.graph.buffer.stats.remote()
            unavailable = {"pipeline/generators_unavailable": float(sum("unavailable" in g for g in gens))}
            ctx.sink.log(ctx.producer.gauges(buf, time.monotonic() - ctx.t0) | delivery_gauges(gens) | unavailable
                         | group_metrics(recent), step=stage.metrics_step())

    async def _status(self, stop: asyncio.Event) -> None:
        """A status line whenever `metrics.status_every_s` passed without a line (cluster/status.py);
        not beside the progress bar, which shows the groups itself."""
        every = self.cfg.metrics.status_every_s
        if not self.progress or self.bar is not None or every <= 0:
            return
        ctx, stage = self._wired()
        producer, graph = ctx.producer, ctx.graph
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), max(every - self.console.quiet_for(), 1.0))
            except asyncio.TimeoutError:
                pass
            if stop.is_set() or self.console.quiet_for() < every:
                continue
            queues = {"generate": graph.generators.waiting, "compile": graph.compilers.waiting,
                      "time": graph.timers.waiting}
            now = time.monotonic()
            self.console.say(status_line(now - ctx.t0, list(producer.in_flight.values()), producer.activity, queues,
                                         producer.tally.groups, stage.metrics_step(), producer.versions.current, now))

    async def _base_summary(self, buf: dict[str, Any]) -> dict[str, Any]:
        ctx, _ = self._wired()
        timers = await answering_stats(ctx.graph.timers.actors)
        gens = await answering_stats(ctx.graph.generators.actors)
        wall = time.monotonic() - ctx.t0
        return {**ctx.producer.tally.summary(), "wall_s": wall, "evaluated": ctx.producer.evaluated,
                "pipeline": ctx.producer.gauges(buf, wall), "buffer": buf, "timers": timers, "generators": gens,
                "archive": ctx.archive.summary(), "run_dir": str(self.run_dir)}


def _failure(task: asyncio.Task[None]) -> BaseException | None:
    """The error a finished task ended with (None when it returned or was cancelled)."""
    return None if task.cancelled() else task.exception()


async def answering_stats(actors: list[ray.actor.ActorHandle]) -> list[dict[str, Any]]:
    """Each actor's `stats()`; one that Ray is restarting (or that died) gives `{"unavailable": why}`
    instead of ending the run: the work it lost is retried by whoever sent it (actors/restarts.py),
    and the next record has its stats again."""
    got = await asyncio.gather(*(a.stats.remote() for a in actors), return_exceptions=True)
    out: list[dict[str, Any]] = []
    for stats in got:
        if isinstance(stats, RayActorError):
            out.append({"unavailable": " ".join(str(stats).split())[:300]})
        elif isinstance(stats, BaseException):
            raise stats
        else:
            out.append(stats)
    return out


def delivery_gauges(generator_stats: list[dict[str, Any]]) -> dict[str, float]:
    """The adapter delivery checks of every generator (rl_kernels/policy/delivery.py), summed (those
    that judged a magnified copy of the adapter counted apart as well), the
    share of the learner's adapter effect farthest from 1 that any of them measured, and the largest
    last base gap (the numerics a conclusive check must stand out of)."""
    keys = ("adapter_checks", "adapter_check_failures", "adapter_inconclusive", "adapter_unchecked",
            "adapter_magnified")
    out = {f"policy/delivery/{k.removeprefix('adapter_')}": float(sum(g.get(k, 0) for g in generator_stats))
           for k in keys}
    shares, gaps = _measured(generator_stats, "adapter_share_worst"), _measured(generator_stats, "adapter_base_gap_last")
    return (out | ({"policy/delivery/share_worst": max(shares, key=lambda x: abs(x - 1.0))} if shares else {})
            | ({"policy/delivery/base_gap": max(gaps)} if gaps else {}))


def _measured(generator_stats: list[dict[str, Any]], key: str) -> list[float]:
    """`key` of every generator that has measured it (nan, or absent for a simulated one, when not)."""
    return [g[key] for g in generator_stats if not math.isnan(g.get(key, math.nan))]


def _progress_bar(cfg: Config) -> Any:
    from tqdm import tqdm

    return tqdm(total=cfg.rollout.max_groups, unit="group", desc="rollout", dynamic_ncols=True)
