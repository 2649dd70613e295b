"""Scored groups, one at a time: the producer half every stage shares (DESIGN.md "Data flow").

Per group: take a slot from the buffer (backpressure: wait, never drop), build a Contrastive-RL
prompt from the archive, sample G completions on a generator, then for each completion in parallel:
parse, build on the compile pool, evaluate on a timer; finally submit the scored group (persisted
before it counts). Groups overlap, bounded by the buffer's capacity and the pools' sizes; a slow
build never blocks the generators (they move on to the next group while builds queue).

Every group ends exactly once: accepted, filtered, or failed (its generator died twice, or a bug
here, which is kept in `errors` and re-raised by the driver after the other groups finished).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from rl_kernels.actors.compiler import build_or_fail
from rl_kernels.actors.generator import GENERATOR_FAILED, generate_or_fail
from rl_kernels.actors.timer import evaluate_or_fail
from rl_kernels.archive import KernelArchive
from rl_kernels.cluster.graph import ProducerGraph
from rl_kernels.cluster.status import Console, GroupProgress
from rl_kernels.cluster.versions import PolicyVersions
from rl_kernels.config import Config
from rl_kernels.policy import Completion
from rl_kernels.policy.factory import sampling_params
from rl_kernels.prompts import parse_completion
from rl_kernels.rollout import SEED_POLICY_VERSION, Tally, build_failure, group_line, make_prompt, trajectory
from rl_kernels.trajectories import Group, Trajectory
from rl_kernels.types import Measurement, Task

log = logging.getLogger(__name__)
DRIVER_ERROR = "driver_error"


def _no_stamp(task: Task) -> dict[str, Any]:
    """A stage that stamps nothing on its groups."""
    return {}


class GroupProducer:
    """Makes, scores and submits groups on `graph`; counts what it did (`tally`, tokens, evaluations,
    time spent timing and waiting for slots), keeps the groups finished since `take_recent` and
    where each group in flight is (`in_flight`, `activity`: what the job's status line reports)."""

    def __init__(self, cfg: Config, graph: ProducerGraph, archive: KernelArchive, versions: PolicyVersions,
                 rng: random.Random, bar: Any = None, console: Console | None = None) -> None:
        self.cfg, self.graph, self.archive, self.versions, self.rng, self.bar = cfg, graph, archive, versions, rng, bar
        self.console = console if console is not None else Console()
        self.in_flight: dict[str, GroupProgress] = {}
        self.activity: str | None = None      # what the producer does besides groups (measuring the seeds)
        self.tally = Tally()
        self.submitted = 0                    # groups granted a slot so far (ids keep counting across resumes)
        self.errors: list[BaseException] = []
        self.blocked_s = 0.0                  # time spent waiting for a slot
        self.timed_ms = 0.0                   # candidate + baseline time actually timed
        self.evaluated = 0
        self.tokens = 0
        self.stamp: Callable[[Task], dict[str, Any]] = _no_stamp   # what the stage adds to each group's extra
        self._recent: list[Group] = []

    def next_id(self) -> str:
        """The id of the next group (numbered in submission order, unique across resumes)."""
        return f"g{self.submitted:06d}-{uuid.uuid4().hex[:8]}"

    def take_recent(self) -> list[Group]:
        """The groups finished since the last call (for a metrics record)."""
        recent, self._recent = self._recent, []
        return recent

    async def slot(self, gid: str, stopped: Any) -> int | None:
        """Backpressure: ask the buffer until it grants `gid` a slot for the newest version; returns
        that version (the group is then submitted), or None once `stopped()` is true."""
        t0 = time.monotonic()
        try:
            while True:
                version = self.versions.current
                if await self.graph.buffer.request_slot.remote(gid, version):
                    self.submitted += 1
                    return version
                if stopped():
                    return None
                await asyncio.sleep(self.cfg.rollout.slot_poll_s)
        finally:
            self.blocked_s += time.monotonic() - t0

    async def group(self, gid: str, version: int, task: Task) -> Group | None:
        """Produce, persist and count one group; None when it failed (its generator, or a bug here)."""
        t0 = time.monotonic()
        buffer = self.graph.buffer
        progress = self.in_flight[gid] = GroupProgress(task.id, version)
        try:
            group = await self._produce(gid, version, task, progress)
            if group is None:
                await buffer.fail_group.remote(gid, GENERATOR_FAILED)
                return None
            status = await buffer.submit_group.remote(group)
        except Exception as exc:  # noqa: BLE001 - a bug here: account for the group, re-raised at the end
            self.errors.append(exc)
            await buffer.fail_group.remote(gid, DRIVER_ERROR)
            return None
        finally:
            del self.in_flight[gid]
        self.tally.add(group, status)
        self._recent.append(group)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(self.tally.postfix(), refresh=False)
        else:
            self.console.say(group_line(group, status, time.monotonic() - t0))
        return group

    async def _produce(self, gid: str, version: int, task: Task, progress: GroupProgress) -> Group | None:
        backend = self.cfg.eval.backend
        prompt = make_prompt(task, backend, self.archive, self.cfg.prompts, self.rng)
        params = sampling_params(self.cfg.policy, seed=self.rng.randrange(2**31))
        completions = await self.sample(prompt.messages, params, version)
        if completions is None:
            return None
        self.tokens += sum(len(c.token_ids) for c in completions)
        progress.phase = "measuring"
        trajs = await self.score(task, completions, progress)
        return Group(group_id=gid, task_id=task.id, policy_version=version, trajectories=list(trajs),
                     backend=backend, extra={"prompt_mode": prompt.mode,
                                             "exemplar_speedups": prompt.exemplar_speedups, **self.stamp(task)},
                     prompt_token_ids=list(completions[0].prompt_token_ids) if completions else [])

    async def sample(self, messages: list[dict[str, str]], params: Any, version: int) -> list[Completion] | None:
        """One prompt's completions on a free generator; None when the generator died twice."""
        c = self.cfg.cluster
        async with self.graph.generators.use() as generator:
            out, _ = await generate_or_fail(generator, [messages], params, version,
                                            adapter_path=self.versions.path(version), retries=c.actor_retries,
                                            restart_timeout_s=c.restart_timeout_s)
        return out[0] if out is not None else None

    async def score(self, task: Task, completions: list[Completion],
                    progress: GroupProgress | None = None) -> list[Trajectory]:
        """Parse every completion, measure the kernels concurrently (each distinct one once, with
        `rollout.dedupe_group_sources`), and make the group's trajectories in completion order;
        `progress` counts the measurements as they finish."""
        parsed = [parse_completion(c.text, task, self.cfg.eval.backend) for c in completions]
        dedupe = self.cfg.rollout.dedupe_group_sources
        # One measurement per key: the source itself when deduplicating, else the completion.
        keys = [(p.code if dedupe else i) if p.code is not None else None for i, p in enumerate(parsed)]
        jobs = {key: p.code for key, p in zip(keys, parsed) if key is not None}
        if progress is not None:
            progress.kernels = len(jobs)

        async def counted(source: str) -> Measurement:
            m = await self.measure(task, source)
            if progress is not None:
                progress.measured += 1
            return m

        measured = dict(zip(jobs, await asyncio.gather(*(counted(c) for c in jobs.values()))))
        return [trajectory(i, c, p, measured.get(key) if key is not None else None, self.cfg.eval.reward)
                for i, (c, p, key) in enumerate(zip(completions, parsed, keys))]

    async def measure(self, task: Task, source: str) -> Measurement:
        """Compile pool, then a timer. The build result moves to the timer as an ObjectRef."""
        c, ev = self.cfg.cluster, self.cfg.eval
        async with self.graph.compilers.use() as compiler:
            ref, build, _ = await build_or_fail(compiler, task, source, retries=c.actor_retries,
                                                restart_timeout_s=c.restart_timeout_s)
        if ref is None or not build.ok:
            return build_failure(task, build, ev.backend, ev.timing.mode, ev.reward)
        async with self.graph.timers.use() as timer:
            m, _ = await evaluate_or_fail(timer, task, source, ref, ev, retries=c.actor_retries,
                                          restart_timeout_s=c.restart_timeout_s)
        self.evaluated += 1
        if m.candidate_ms is not None and m.baseline_ms is not None:
            self.timed_ms += m.samples * (m.candidate_ms + m.baseline_ms)
        return m

    async def seed_archive(self, tasks: list[Task]) -> None:
        """Measure each task's seed kernel once, so contrastive prompts start from a measured,
        compiling exemplar (DESIGN.md "Learning": the seed exemplar)."""
        backend = self.cfg.eval.backend

        async def seed(task: Task) -> None:
            source = task.seeds.get(backend)
            if source is None or self.archive.kernels(task.id, backend):
                return
            m = await self.measure(task, source)
            added = await self.graph.buffer.archive_kernel.remote(task.id, source, m, SEED_POLICY_VERSION, backend)
            if not added:
                log.warning("seed of %s did not enter the archive: %s %s", task.id, m.rejected, m.detail[:300])

        if self.cfg.prompts.mode == "contrastive":
            self.activity = f"measuring the seed kernels of {len(tasks)} task(s) for the first prompts' exemplars"
            try:
                await asyncio.gather(*(seed(t) for t in tasks))
            finally:
                self.activity = None

    def gauges(self, buf: dict[str, Any], wall: float) -> dict[str, float]:
        """The pipeline's queues, utilisation and rates (DESIGN.md "Monitoring"); `buf` is the
        buffer's stats, `wall` the seconds since the run started."""
        g = self.graph
        wall = max(wall, 1e-9)
        return {
            "pipeline/queue/generate": g.generators.waiting, "pipeline/queue/compile": g.compilers.waiting,
            "pipeline/queue/time": g.timers.waiting, "pipeline/buffer/buffered": buf["buffered"],
            "pipeline/buffer/running": buf["running"], "pipeline/buffer/capacity": buf["capacity"],
            "pipeline/buffer/refused": buf["refused"], "pipeline/groups/accepted": buf["accepted"],
            "pipeline/groups/filtered": buf["filtered"], "pipeline/groups/failed": buf["failed"],
            "pipeline/util/generators": g.generators.utilisation(),
            "pipeline/util/compilers": g.compilers.utilisation(),
            "pipeline/util/timers": g.timers.utilisation(),
            "pipeline/idle/generators": 1.0 - g.generators.utilisation(),
            "pipeline/idle/timers": 1.0 - g.timers.utilisation(),
            "pipeline/idle/producer_blocked": self.blocked_s / wall,
            "pipeline/timer_timed_fraction": self.timed_ms / 1e3 / (len(g.timers.actors) * wall),
            "pipeline/tokens_per_s": self.tokens / wall,
            "pipeline/candidates_per_min": 60.0 * self.tally.completions / wall,
            "pipeline/evaluated_per_min": 60.0 * self.evaluated / wall,
            "policy/version": self.versions.current,
        }
