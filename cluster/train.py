"""`rl-kernels train`: the learner closes the loop. Groups are sampled with the newest published
policy version; accepted ones go to the learner:

    get_batch (waits, counted as learner idle) -> learner.train_step -> a new version is published
    -> buffer.set_version (stale groups dropped, producer slots freed) -> generators load the
    adapter (in the background; a generator that lacks a version loads it on first use anyway)
    -> metrics and the console line -> every `train.checkpoint_every` steps, a checkpoint;
    every `split.eval_every_versions` versions, a held-out check of the new version (in the
    background, through the same generators and timers; rl_kernels/heldout.py).

Production and the learner run concurrently; the buffer's staleness budget is the only coupling,
so generation, builds, timing and training overlap up to `rollout.max_staleness` versions. The run
ends after `train.max_steps` learner steps or `train.time_budget_s`, or when production ends
(rollout bounds) and the buffer is empty; a last checkpoint is always written, so `--resume`
continues it.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

from rl_kernels.cluster.driver import RunContext
from rl_kernels.cluster.search import production_ended
from rl_kernels.heldout import (TaskTally, append_report, heldout_metrics, heldout_prompt, heldout_sampling,
                                summarize, summary_line)
from rl_kernels.learner.checkpoints import python_rng_state
from rl_kernels.learner.publish import adapter_dir
from rl_kernels.metrics import group_metrics
from rl_kernels.task_sampler import TaskSampler
from rl_kernels.tasks import load_suite
from rl_kernels.tasks.split import task_split
from rl_kernels.trajectories import FILENAME as TRAJECTORIES, Group
from rl_kernels.types import Task

log = logging.getLogger(__name__)
SUMMARY = "train_summary.json"


class LearnStage:
    LEARNER = True
    SUMMARY = SUMMARY
    BAR = False   # the per-step console line is the progress report

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        self.sampler = TaskSampler(ctx.tasks, ctx.rng, cfg.rollout)
        ctx.producer.stamp = self.sampler.stamp
        self.rollout_deadline = ctx.t0 + cfg.rollout.time_budget_s if cfg.rollout.time_budget_s else None
        self.deadline = ctx.t0 + cfg.train.time_budget_s if cfg.train.time_budget_s else None
        self.step = 0
        self.start_step = 0            # the step this process started at (a resumed run's rates count from it)
        self.resumed_from: dict[str, Any] | None = None
        self.done = False              # the learner loop ended: no new group is started
        self.wait_s = 0.0              # learner idle: waiting for a batch
        self.busy_s = 0.0
        self.history: list[dict[str, float]] = []   # per step: reward, correct rate, version
        self.heldout_tasks = task_split(cfg.split).heldout(load_suite(cfg.suite))
        self.heldout: list[dict[str, Any]] = []     # one summary per checked version
        self._checks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """On --resume: the learner loads its newest checkpoint and the buffer is rebuilt from
        trajectories.jsonl as of that checkpoint (buffer_restore.py); then the restored version is
        announced again. Without a checkpoint the run restarts at step 0, version 0. The task
        sampler's health is rebuilt from every group the file holds (task_sampler.py)."""
        ctx = self.ctx
        if not ctx.resume:
            return
        self.sampler.restore(ctx.run_dir / TRAJECTORIES)
        state = await ctx.graph.learner.resume.remote()
        step, version = (int(state["step"]), int(state["version"])) if state else (0, 0)
        books = await ctx.graph.buffer.restore.remote(step, version)
        self.step = self.start_step = step
        ctx.producer.submitted = int(books["submitted"])   # every group the file knows: ids keep counting up
        if state is not None:
            ctx.rng.setstate(python_rng_state(state["driver"]["rng"]))
        if version > 0:
            ctx.versions.publish(version, adapter_dir(ctx.run_dir, version))
            await ctx.versions.announce(ctx.graph.generators.actors, version)
        self.resumed_from = {"step": step, "version": version, "requeued": books["requeued"],
                             "buffered": books["buffered"]}
        log.warning("resumed at learner step %d, policy v%d: %d groups waiting (%d re-queued from lost steps)",
                    step, version, books["buffered"], books["requeued"])

    async def tasks(self) -> AsyncIterator[Task]:
        while not self.stopped():
            yield self.sampler.next()

    def stopped(self) -> bool:
        return self.done or production_ended(self.ctx, self.rollout_deadline)

    def on_group(self, group: Group | None) -> None:
        """Counted by the producer; the learner takes accepted groups from the buffer. The sampler
        sees every scored group in the order they finish, and a task turning weak or healthy is said."""
        if group is None:
            return
        was_weak = self.sampler.health.weak(group.task_id)
        self.sampler.observe(group)
        if self.sampler.health.weak(group.task_id) != was_weak:
            self.ctx.say(self.sampler.health_line(group.task_id))

    def metrics_step(self) -> int:
        return self.step

    async def consume(self, stop: asyncio.Event) -> None:
        """The learner loop (see the module docstring)."""
        ctx, t, n = self.ctx, self.ctx.cfg.train, self.ctx.cfg.rollout.batch_groups
        pending: list[Group] = []
        try:
            while not self._learner_finished():
                t0 = time.monotonic()
                pending += await ctx.graph.buffer.get_batch.remote(n - len(pending), t.batch_timeout_s, self.step + 1)
                self.wait_s += time.monotonic() - t0
                if len(pending) < n and not (stop.is_set() and pending):
                    if stop.is_set():
                        break   # production ended and the buffer is empty
                    continue
                await self._train_on(pending)
                pending = []
                if self.step % t.checkpoint_every == 0:
                    await self._checkpoint()
        finally:
            self.done = True
        await ctx.versions.settle()
        if self._checks:
            await asyncio.gather(*self._checks)
        await self._checkpoint()

    def _learner_finished(self) -> bool:
        if self.ctx.producer.errors:
            return True
        if self.ctx.cfg.train.max_steps is not None and self.step >= self.ctx.cfg.train.max_steps:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    # ---- one learner step -----------------------------------------------------------------------
    async def _train_on(self, groups: list[Group]) -> None:
        ctx = self.ctx
        t0 = time.monotonic()
        out = await ctx.graph.learner.train_step.remote(groups)
        self.busy_s += time.monotonic() - t0
        self.step = int(out.pop("step"))
        version, path = int(out.pop("version")), out.pop("adapter_path")
        if path is not None:
            dropped = await ctx.graph.buffer.set_version.remote(version)
            ctx.versions.publish(version, path)
            ctx.versions.announce_in_background(ctx.graph.generators.actors, version)
            out["learner/dropped_stale_groups"] = len(dropped)
            every = ctx.cfg.split.eval_every_versions
            if every and self.heldout_tasks and version % every == 0:
                check = asyncio.create_task(self._check_heldout(version))
                self._checks.add(check)
                check.add_done_callback(self._checks.discard)
        batch = group_metrics(groups)
        wall = max(time.monotonic() - ctx.t0, 1e-9)
        record = {**out, **{f"batch/{k.split('/', 1)[1]}": v for k, v in batch.items()},
                  "policy/version": ctx.versions.current, "learner/step": self.step,
                  "learner/idle_ratio": self.wait_s / wall, "learner/busy_ratio": self.busy_s / wall,
                  "learner/steps_per_hour": self._steps_per_hour(wall),
                  "batch/weak_task_groups": sum(g.made_weak for g in groups), **self.sampler.metrics()}
        if ctx.versions.sync_s:
            record["learner/weight_sync_s"] = ctx.versions.sync_s[-1]
        ctx.sink.log(record, step=self.step)
        self.history.append({"step": self.step, "version": ctx.versions.current,
                             "reward": batch.get("rollout/reward_mean", 0.0),
                             "correct": batch.get("rollout/correct_rate", 0.0)})
        print(self._console_line(out, batch), flush=True)

    async def _check_heldout(self, version: int) -> None:
        """`version` on the held-out tasks through the same generators, compile pool and timers;
        logged as heldout/* at the current step and appended to heldout.jsonl, never archived or
        trained on (rl_kernels/heldout.py)."""
        ctx = self.ctx
        params = heldout_sampling(ctx.cfg)
        tallies = []
        for task in self.heldout_tasks:
            completions = await ctx.producer.sample(heldout_prompt(task, ctx.cfg.eval.backend), params, version)
            tally = TaskTally(task.id)
            for t in await ctx.producer.score(task, completions or []):
                tally.add(t.detail or None, t.measurement)
            tallies.append(tally)
        summary = summarize(tallies, version)
        append_report(ctx.run_dir, summary)
        self.heldout.append({k: v for k, v in summary.items() if k != "per_task"})
        ctx.sink.log(heldout_metrics(summary), step=self.step)
        print(summary_line(summary), flush=True)

    async def _checkpoint(self) -> None:
        ctx = self.ctx
        driver = {"rng": ctx.rng.getstate()}
        await ctx.graph.learner.save_checkpoint.remote({"driver": driver,
                                                        "buffer": await ctx.graph.buffer.state_dict.remote()})

    def _steps_per_hour(self, wall: float) -> float:
        """Steps this process took per hour of its wall time (a resumed run counts from its start step)."""
        return 3600.0 * (self.step - self.start_step) / wall

    def _console_line(self, out: dict[str, Any], batch: dict[str, float]) -> str:
        ctx = self.ctx
        g = ctx.graph
        best = ctx.producer.tally.best_speedup()
        return (f"step {self.step:4d} v{ctx.versions.current:<4d} | reward {batch.get('rollout/reward_mean', 0.0):6.3f} "
                f"| correct {batch.get('rollout/correct_rate', 0.0):4.2f} compiled {batch.get('rollout/compile_rate', 0.0):4.2f} "
                f"| best {f'{best:.2f}x' if best else '-':>6} | stale {out['learner/staleness_mean']:.1f} "
                f"| loss {out['learner/loss']:+.4f} clip {out['learner/clip_fraction']:.3f} "
                f"| queues gen {g.generators.waiting} compile {g.compilers.waiting} time {g.timers.waiting} "
                f"| {(time.monotonic() - ctx.t0) / max(self.step - self.start_step, 1):.0f} s/step wall, "
                f"learner {out['learner/step_s']:.1f} s")

    # ---- the end --------------------------------------------------------------------------------
    async def summary(self, base: dict[str, Any]) -> dict[str, Any]:
        ctx, hist = self.ctx, self.history
        third = max(1, len(hist) // 3)
        trend = {"first_steps_reward": statistics.fmean(h["reward"] for h in hist[:third]) if hist else None,
                 "last_steps_reward": statistics.fmean(h["reward"] for h in hist[-third:]) if hist else None}
        wall = max(time.monotonic() - ctx.t0, 1e-9)
        return {**base, "steps": self.step, "version": ctx.versions.current, "resumed_from": self.resumed_from,
                "reward_trend": trend, "history": hist, "learner_idle_ratio": self.wait_s / wall,
                "steps_per_hour": self._steps_per_hour(wall), "weight_sync_s_median": ctx.versions.sync_median_s(),
                "best_kernels": ctx.archive.summary(), "heldout": self.heldout,
                "task_sampling": self.sampler.summary()}
