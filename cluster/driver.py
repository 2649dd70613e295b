"""`rl-kernels rollout`: the producer half on Ray, streaming scored groups into the replay buffer.

Per group (DESIGN.md "Data flow"): take a slot from the buffer (backpressure: wait, never drop),
build a Contrastive-RL prompt from the archive, sample G completions on a generator, then for each
completion in parallel: parse, build on the compile pool, evaluate on a timer; finally submit the
scored group (persisted before it counts). Generation, compilation and timing of different groups
overlap, bounded by the buffer's capacity and the pools' sizes; a slow build never blocks the
generators (they move on to the next group while builds queue in the compile pool).

Without a learner the buffer runs in search mode and this driver consumes what it accepts, so the
run is bounded by `rollout.max_groups` / `rollout.time_budget_s`, not by staleness.

Every group ends exactly once: accepted, filtered, or failed (its generator died twice, or a bug
in this driver, which is then re-raised after the other groups finished).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
import uuid
from pathlib import Path
from typing import Any

import ray

from rl_kernels.actors.compiler import build_or_fail
from rl_kernels.actors.generator import GENERATOR_FAILED, generate_or_fail
from rl_kernels.actors.timer import evaluate_or_fail
from rl_kernels.cluster.graph import ProducerGraph, build_graph, kill_graph, start_ray
from rl_kernels.archive import KernelArchive
from rl_kernels.config import Config, ConfigError, dump_config
from rl_kernels.metrics import MetricsSink, group_metrics
from rl_kernels.policy import BASE_VERSION, Completion
from rl_kernels.policy.factory import sampling_params
from rl_kernels.prompts import parse_completion
from rl_kernels.rollout import (SEED_POLICY_VERSION, Tally, TaskCycle, build_failure, group_line, make_prompt,
                                trajectory)
from rl_kernels.tasks import load_suite
from rl_kernels.tasks.split import task_split
from rl_kernels.trajectories import FILENAME as TRAJECTORIES, Group, Trajectory
from rl_kernels.types import Measurement, Task

log = logging.getLogger(__name__)
SUMMARY = "rollout_summary.json"
DRIVER_ERROR = "driver_error"


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


def prepare_run_dir(cfg: Config, resume: bool) -> Path:
    run = Path(cfg.run_dir)
    if (run / TRAJECTORIES).exists() and not resume:
        raise RunDirError(f"{run} already holds a run ({TRAJECTORIES}); pass --resume to continue it "
                          f"(archive and trajectories are appended to) or set run_dir=... for a new one")
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(dump_config(cfg))
    return run


class RolloutDriver:
    LEARNER = False   # search mode: no learner actor, the buffer is drained by `_consume`
    SUMMARY = SUMMARY

    def __init__(self, cfg: Config, *, resume: bool = False, progress: bool = True) -> None:
        self.cfg = cfg
        self.run_dir = prepare_run_dir(cfg, resume)
        self.resume = resume
        self.progress = progress
        self.tasks = select_tasks(cfg)
        self.rng = random.Random(cfg.rollout.seed)
        self.cycle = TaskCycle(self.tasks, self.rng)
        self.archive = KernelArchive(self.run_dir / "archive.sqlite")
        self.tally = Tally()
        self._recent: list[Group] = []        # finished since the last metrics record
        self._blocked_s = 0.0                 # time the producer waited for a slot
        self._timed_ms = 0.0                  # candidate + baseline time actually timed
        self._evaluated = 0
        self._tokens = 0
        self._errors: list[BaseException] = []
        self._submitted = 0
        self.graph: ProducerGraph | None = None   # set once the actors are up (tests kill them)
        self.version = BASE_VERSION           # the newest published policy version (train mode)
        self._adapter_paths: dict[int, str] = {}  # version -> its adapter directory

    # ---- the run --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        started_ray = start_ray(self.cfg, learner=self.LEARNER)
        try:
            return asyncio.run(self._run())
        finally:
            if started_ray:
                ray.shutdown()

    async def _run(self) -> dict[str, Any]:
        graph = self.graph = await build_graph(self.cfg, learner=self.LEARNER)
        self.t0 = time.monotonic()
        sink = self._sink = MetricsSink(self.run_dir, self.cfg.metrics, run_config=self.cfg.model_dump(mode="json"),
                                        name=self.run_dir.name, resume=self.resume)
        bar = _progress_bar(self.cfg, self.progress)
        try:
            await self._prepare(graph)
            await self._seed_archive(graph)
            stop = asyncio.Event()
            consumer = asyncio.create_task(self._consume(graph, stop))
            ticker = asyncio.create_task(self._tick(graph, sink, stop))
            in_flight: set[asyncio.Task[None]] = set()
            deadline = self.t0 + self.cfg.rollout.time_budget_s if self.cfg.rollout.time_budget_s else None
            while not self._should_stop(deadline):
                gid = self._group_id()
                version = await self._wait_slot(graph, gid, deadline)
                if version is None:
                    break
                self._submitted += 1
                task = asyncio.create_task(self._group(graph, gid, version, self.cycle.next(), bar))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            if in_flight:
                await asyncio.gather(*in_flight)
            stop.set()
            await asyncio.gather(consumer, ticker)
            summary = await self._summary(graph)
            sink.log(self._gauges(graph, await graph.buffer.stats.remote()) | group_metrics(self._recent),
                     step=self._metrics_step())
        finally:
            if bar is not None:
                bar.close()
            sink.close()
            kill_graph(graph)
        (self.run_dir / self.SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
        if self._errors:
            raise self._errors[0]
        return summary

    async def _prepare(self, graph: ProducerGraph) -> None:
        """Hook before production starts (train mode resumes the learner and the buffer here)."""

    def _metrics_step(self) -> int:
        """The x axis of metrics: groups finished in search mode, learner steps in train mode."""
        return self.tally.groups

    def _should_stop(self, deadline: float | None) -> bool:
        if self._errors:
            return True
        if self.cfg.rollout.max_groups is not None and self._submitted >= self.cfg.rollout.max_groups:
            return True
        return deadline is not None and time.monotonic() >= deadline

    async def _wait_slot(self, graph: ProducerGraph, gid: str, deadline: float | None) -> int | None:
        """Backpressure: ask the buffer until it grants a slot for the newest policy version; returns
        that version (None if the run ended first)."""
        t0 = time.monotonic()
        try:
            while True:
                version = self.version
                if await graph.buffer.request_slot.remote(gid, version):
                    return version
                if self._should_stop(deadline):
                    return None
                await asyncio.sleep(self.cfg.rollout.slot_poll_s)
        finally:
            self._blocked_s += time.monotonic() - t0

    # ---- one group ------------------------------------------------------------------------------
    def _group_id(self) -> str:
        """The id of the next group (numbered in submission order, unique across resumes)."""
        return f"g{self._submitted:06d}-{uuid.uuid4().hex[:8]}"

    async def _group(self, graph: ProducerGraph, gid: str, version: int, task: Task, bar: Any) -> Group | None:
        """Produce, persist and count one group; None when it failed (its generator, or a driver bug)."""
        t0 = time.monotonic()
        try:
            group = await self._produce(graph, gid, version, task)
            if group is None:
                await graph.buffer.fail_group.remote(gid, GENERATOR_FAILED)
                return None
            status = await graph.buffer.submit_group.remote(group)
        except Exception as exc:  # noqa: BLE001 - a driver bug: account for the group, then re-raise
            self._errors.append(exc)
            await graph.buffer.fail_group.remote(gid, DRIVER_ERROR)
            return None
        self.tally.add(group, status)
        self._recent.append(group)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(self.tally.postfix(), refresh=False)
        else:
            print(group_line(group, status, time.monotonic() - t0), flush=True)
        return group

    async def _produce(self, graph: ProducerGraph, gid: str, version: int, task: Task) -> Group | None:
        backend = self.cfg.eval.backend
        prompt = make_prompt(task, backend, self.archive, self.cfg.prompts, self.rng)
        params = sampling_params(self.cfg.policy, seed=self.rng.randrange(2**31))
        async with graph.generators.use() as generator:
            out, _ = await generate_or_fail(generator, [prompt.messages], params, version,
                                            adapter_path=self._adapter_paths.get(version),
                                            retries=self.cfg.cluster.actor_retries,
                                            restart_timeout_s=self.cfg.cluster.restart_timeout_s)
        if out is None:
            return None
        completions = out[0]
        self._tokens += sum(len(c.token_ids) for c in completions)
        trajs = await self._score(graph, task, completions)
        return Group(group_id=gid, task_id=task.id, policy_version=version, trajectories=list(trajs),
                     backend=backend, extra={"prompt_mode": prompt.mode,
                                             "exemplar_speedups": prompt.exemplar_speedups},
                     prompt_token_ids=list(completions[0].prompt_token_ids) if completions else [])

    async def _score(self, graph: ProducerGraph, task: Task, completions: list[Completion]) -> list[Trajectory]:
        """Parse every completion, measure the kernels concurrently (each distinct one once, with
        `rollout.dedupe_group_sources`), and make the group's trajectories in completion order."""
        parsed = [parse_completion(c.text, task, self.cfg.eval.backend) for c in completions]
        dedupe = self.cfg.rollout.dedupe_group_sources
        # One measurement per key: the source itself when deduplicating, else the completion.
        keys = [(p.code if dedupe else i) if p.code is not None else None for i, p in enumerate(parsed)]
        jobs = {key: p.code for key, p in zip(keys, parsed) if key is not None}
        measured = dict(zip(jobs, await asyncio.gather(*(self._measure(graph, task, c) for c in jobs.values()))))
        return [trajectory(i, c, p, measured.get(key) if key is not None else None, self.cfg.eval.reward)
                for i, (c, p, key) in enumerate(zip(completions, parsed, keys))]

    async def _measure(self, graph: ProducerGraph, task: Task, source: str) -> Measurement:
        """Compile pool, then a timer. The build result moves to the timer as an ObjectRef."""
        c, ev = self.cfg.cluster, self.cfg.eval
        async with graph.compilers.use() as compiler:
            ref, build, _ = await build_or_fail(compiler, task, source, retries=c.actor_retries,
                                                restart_timeout_s=c.restart_timeout_s)
        if ref is None or not build.ok:
            return build_failure(task, build, ev.backend, ev.timing.mode, ev.reward)
        async with graph.timers.use() as timer:
            m, _ = await evaluate_or_fail(timer, task, source, ref, ev, retries=c.actor_retries,
                                          restart_timeout_s=c.restart_timeout_s)
        self._evaluated += 1
        if m.candidate_ms is not None and m.baseline_ms is not None:
            self._timed_ms += m.samples * (m.candidate_ms + m.baseline_ms)
        return m

    # ---- seeds, consumer, metrics ---------------------------------------------------------------
    async def _seed_archive(self, graph: ProducerGraph) -> None:
        """Measure each task's seed kernel once, so contrastive prompts start from a measured,
        compiling exemplar (DESIGN.md "Learning": the seed exemplar)."""
        backend = self.cfg.eval.backend

        async def seed(task: Task) -> None:
            source = task.seeds.get(backend)
            if source is None or self.archive.kernels(task.id, backend):
                return
            m = await self._measure(graph, task, source)
            added = await graph.buffer.archive_kernel.remote(task.id, source, m, SEED_POLICY_VERSION, backend)
            if not added:
                log.warning("seed of %s did not enter the archive: %s %s", task.id, m.rejected, m.detail[:300])

        if self.cfg.prompts.mode == "contrastive":
            await asyncio.gather(*(seed(t) for t in self.tasks))

    async def _consume(self, graph: ProducerGraph, stop: asyncio.Event) -> None:
        """Search mode's consumer: take accepted groups off the buffer (they are persisted already),
        which frees their slots."""
        n = self.cfg.rollout.batch_groups
        while True:
            batch = await graph.buffer.get_batch.remote(n, 0.5)
            if stop.is_set() and not batch:
                return

    async def _tick(self, graph: ProducerGraph, sink: MetricsSink, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.cfg.metrics.interval_s)
            except asyncio.TimeoutError:
                pass
            if stop.is_set():
                return
            recent, self._recent = self._recent, []
            gens = await asyncio.gather(*(g.stats.remote() for g in graph.generators.actors))
            sink.log(self._gauges(graph, await graph.buffer.stats.remote()) | delivery_gauges(gens)
                     | group_metrics(recent), step=self._metrics_step())

    def _gauges(self, graph: ProducerGraph, buf: dict[str, Any]) -> dict[str, float]:
        wall = max(time.monotonic() - self.t0, 1e-9)
        return {
            "pipeline/queue/generate": graph.generators.waiting, "pipeline/queue/compile": graph.compilers.waiting,
            "pipeline/queue/time": graph.timers.waiting, "pipeline/buffer/buffered": buf["buffered"],
            "pipeline/buffer/running": buf["running"], "pipeline/buffer/capacity": buf["capacity"],
            "pipeline/buffer/refused": buf["refused"], "pipeline/groups/accepted": buf["accepted"],
            "pipeline/groups/filtered": buf["filtered"], "pipeline/groups/failed": buf["failed"],
            "pipeline/util/generators": graph.generators.utilisation(),
            "pipeline/util/compilers": graph.compilers.utilisation(),
            "pipeline/util/timers": graph.timers.utilisation(),
            "pipeline/idle/generators": 1.0 - graph.generators.utilisation(),
            "pipeline/idle/timers": 1.0 - graph.timers.utilisation(),
            "pipeline/idle/producer_blocked": self._blocked_s / wall,
            "pipeline/timer_timed_fraction": self._timed_ms / 1e3 / (len(graph.timers.actors) * wall),
            "pipeline/tokens_per_s": self._tokens / wall,
            "pipeline/candidates_per_min": 60.0 * self.tally.completions / wall,
            "pipeline/evaluated_per_min": 60.0 * self._evaluated / wall,
            "policy/version": self.version,
        }

    async def _summary(self, graph: ProducerGraph) -> dict[str, Any]:
        buf = await graph.buffer.stats.remote()
        timers = await asyncio.gather(*(t.stats.remote() for t in graph.timers.actors))
        gens = await asyncio.gather(*(g.stats.remote() for g in graph.generators.actors))
        wall = time.monotonic() - self.t0
        return {**self.tally.summary(), "wall_s": wall, "evaluated": self._evaluated,
                "pipeline": self._gauges(graph, buf), "buffer": buf,
                "timers": timers, "generators": gens, "archive": self.archive.summary(),
                "run_dir": str(self.run_dir)}


def delivery_gauges(generator_stats: list[dict[str, Any]]) -> dict[str, float]:
    """The adapter delivery checks of every generator (rl_kernels/policy/delivery.py), summed, and the
    share of the learner's adapter effect farthest from 1 that any of them measured."""
    keys = ("adapter_checks", "adapter_check_failures", "adapter_inconclusive", "adapter_unchecked")
    out = {f"policy/delivery/{k.removeprefix('adapter_')}": float(sum(g.get(k, 0) for g in generator_stats))
           for k in keys}
    shares = [g["adapter_share_worst"] for g in generator_stats
              if not math.isnan(g.get("adapter_share_worst", math.nan))]
    return out | ({"policy/delivery/share_worst": max(shares, key=lambda x: abs(x - 1.0))} if shares else {})


def _progress_bar(cfg: Config, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=cfg.rollout.max_groups, unit="group", desc="rollout", dynamic_ncols=True)
