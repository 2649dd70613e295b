"""`rl-kernels train`: the rollout pipeline (cluster/driver.py) plus the learner, closing the loop.

The producer half is the rollout driver's, unchanged except that every group is generated with
the newest published policy version. The consumer half is the learner loop here:

    get_batch (waits, counted as learner idle) -> learner.train_step -> a new version is published
    -> buffer.set_version (stale groups dropped, producer slots freed) -> generators load the
    adapter (in the background; a generator that lacks a version loads it on first use anyway)
    -> metrics and the console line -> every `train.checkpoint_every` steps, a checkpoint;
    every `split.eval_every_versions` versions, a held-out check of the new version (in the
    background, through the same generators and timers; rl_kernels/heldout.py).

Both halves run concurrently; the buffer's staleness budget is the only coupling, so generation,
builds, timing and training overlap up to `rollout.max_staleness` versions. The run ends after
`train.max_steps` learner steps or `train.time_budget_s`, or when production ends (rollout
bounds) and the buffer is empty; a last checkpoint is always written, so `--resume` continues it.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from typing import Any

from rl_kernels.actors.generator import generate_or_fail
from rl_kernels.cluster.driver import RolloutDriver
from rl_kernels.cluster.graph import ProducerGraph
from rl_kernels.learner.checkpoints import python_rng_state
from rl_kernels.heldout import (TaskTally, append_report, heldout_metrics, heldout_prompt, heldout_sampling,
                                summarize, summary_line)
from rl_kernels.metrics import MetricsSink, group_metrics
from rl_kernels.tasks import load_suite
from rl_kernels.tasks.split import task_split
from rl_kernels.trajectories import Group

log = logging.getLogger(__name__)
SUMMARY = "train_summary.json"


class TrainDriver(RolloutDriver):
    LEARNER = True
    SUMMARY = SUMMARY

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.progress = False   # the per-step console line is the progress report
        self.step = 0
        self._start_step = 0   # the step this process started at (a resumed run's rates count from it)
        self.resumed_from: dict[str, Any] | None = None
        self._learner_done = False
        self._learner_wait_s = 0.0
        self._learner_busy_s = 0.0
        self._weight_sync_s: list[float] = []
        self._announcing: set[asyncio.Task[None]] = set()
        self._history: list[dict[str, float]] = []   # per step: reward, correct rate, version
        self._heldout_tasks = task_split(self.cfg.split).heldout(load_suite(self.cfg.suite))
        self._heldout_checks: set[asyncio.Task[None]] = set()
        self.heldout: list[dict[str, Any]] = []     # one summary per checked version

    # ---- hooks of the rollout driver ------------------------------------------------------------
    async def _prepare(self, graph: ProducerGraph) -> None:
        """On --resume: the learner loads its newest checkpoint and the buffer is rebuilt from
        trajectories.jsonl as of that checkpoint (buffer_restore.py); then the restored version is
        announced again. Without a checkpoint the run restarts at step 0, version 0."""
        if not self.resume:
            return
        state = await graph.learner.resume.remote()
        step, version = (int(state["step"]), int(state["version"])) if state else (0, 0)
        books = await graph.buffer.restore.remote(step, version)
        self.step, self.version = step, version
        self._start_step = step
        self._submitted = int(books["submitted"])   # every group the file knows: ids keep counting up
        if state is not None:
            self.rng.setstate(python_rng_state(state["driver"]["rng"]))
        if version > 0:
            from rl_kernels.learner.publish import adapter_dir

            self._adapter_paths[version] = str(adapter_dir(self.run_dir, version))
            await self._announce(graph, version, self._adapter_paths[version])
        self.resumed_from = {"step": step, "version": version, "requeued": books["requeued"],
                             "buffered": books["buffered"]}
        log.warning("resumed at learner step %d, policy v%d: %d groups waiting (%d re-queued from lost steps)",
                    step, version, books["buffered"], books["requeued"])

    def _metrics_step(self) -> int:
        return self.step

    def _should_stop(self, deadline: float | None) -> bool:
        return self._learner_done or super()._should_stop(deadline)

    async def _consume(self, graph: ProducerGraph, stop: asyncio.Event) -> None:
        """The learner loop (see the module docstring)."""
        t = self.cfg.train
        deadline = self.t0 + t.time_budget_s if t.time_budget_s else None
        sink = self._sink
        pending: list[Group] = []
        try:
            while not self._learner_finished(deadline):
                t0 = time.monotonic()
                want = self.cfg.rollout.batch_groups - len(pending)
                pending += await graph.buffer.get_batch.remote(want, t.batch_timeout_s, self.step + 1)
                self._learner_wait_s += time.monotonic() - t0
                if len(pending) < self.cfg.rollout.batch_groups and not (stop.is_set() and pending):
                    if stop.is_set():
                        break   # production ended and the buffer is empty
                    continue
                await self._train_on(graph, sink, pending)
                pending = []
                if self.step % t.checkpoint_every == 0:
                    await self._checkpoint(graph)
        finally:
            self._learner_done = True
        if self._announcing:
            await asyncio.gather(*self._announcing)
        if self._heldout_checks:
            await asyncio.gather(*self._heldout_checks)
        await self._checkpoint(graph)

    def _steps_per_hour(self, wall: float) -> float:
        """Steps this process took per hour of its wall time (a resumed run counts from its start step)."""
        return 3600.0 * (self.step - self._start_step) / wall

    def _learner_finished(self, deadline: float | None) -> bool:
        if self._errors:
            return True
        if self.cfg.train.max_steps is not None and self.step >= self.cfg.train.max_steps:
            return True
        return deadline is not None and time.monotonic() >= deadline

    # ---- one learner step -----------------------------------------------------------------------
    async def _train_on(self, graph: ProducerGraph, sink: MetricsSink, groups: list[Group]) -> None:
        t0 = time.monotonic()
        out = await graph.learner.train_step.remote(groups)
        self._learner_busy_s += time.monotonic() - t0
        self.step = int(out.pop("step"))
        version, path = int(out.pop("version")), out.pop("adapter_path")
        if path is not None:
            dropped = await graph.buffer.set_version.remote(version)
            self.version = version
            self._adapter_paths[version] = path
            for old in [v for v in self._adapter_paths if v <= version - self.cfg.rollout.max_staleness - 2]:
                del self._adapter_paths[old]
            task = asyncio.create_task(self._announce(graph, version, path))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)
            out["learner/dropped_stale_groups"] = len(dropped)
            every = self.cfg.split.eval_every_versions
            if every and self._heldout_tasks and version % every == 0:
                check = asyncio.create_task(self._check_heldout(graph, version, path))
                self._heldout_checks.add(check)
                check.add_done_callback(self._heldout_checks.discard)
        batch = group_metrics(groups)
        wall = max(time.monotonic() - self.t0, 1e-9)
        record = {**out, **{f"batch/{k.split('/', 1)[1]}": v for k, v in batch.items()},
                  "policy/version": self.version, "learner/step": self.step,
                  "learner/idle_ratio": self._learner_wait_s / wall,
                  "learner/busy_ratio": self._learner_busy_s / wall,
                  "learner/steps_per_hour": self._steps_per_hour(wall)}
        if self._weight_sync_s:
            record["learner/weight_sync_s"] = self._weight_sync_s[-1]
        sink.log(record, step=self.step)
        self._history.append({"step": self.step, "version": self.version,
                              "reward": batch.get("rollout/reward_mean", 0.0),
                              "correct": batch.get("rollout/correct_rate", 0.0)})
        print(self._console_line(graph, out, batch), flush=True)

    async def _check_heldout(self, graph: ProducerGraph, version: int, path: str) -> None:
        """`version` on the held-out tasks through the same generators, compile pool and timers;
        logged as heldout/* at the current step and appended to heldout.jsonl, never archived or
        trained on (rl_kernels/heldout.py)."""
        params = heldout_sampling(self.cfg)
        backend = self.cfg.eval.backend
        tallies = []
        for task in self._heldout_tasks:
            async with graph.generators.use() as generator:
                out, _ = await generate_or_fail(generator, [heldout_prompt(task, backend)], params, version,
                                                adapter_path=path, retries=self.cfg.cluster.actor_retries,
                                                restart_timeout_s=self.cfg.cluster.restart_timeout_s)
            tally = TaskTally(task.id)
            for t in await self._score(graph, task, out[0] if out else []):
                tally.add(t.detail or None, t.measurement)
            tallies.append(tally)
        summary = summarize(tallies, version)
        append_report(self.run_dir, summary)
        self.heldout.append({k: v for k, v in summary.items() if k != "per_task"})
        self._sink.log(heldout_metrics(summary), step=self.step)
        print(summary_line(summary), flush=True)

    async def _announce(self, graph: ProducerGraph, version: int, path: str) -> None:
        """Every generator loads `version` (they keep max_staleness + 2; older ones drop out)."""
        t0 = time.monotonic()
        await asyncio.gather(*(g.load_adapter.remote(version, path) for g in graph.generators.actors),
                             return_exceptions=True)  # a dead generator reloads on its next request
        self._weight_sync_s.append(time.monotonic() - t0)

    async def _checkpoint(self, graph: ProducerGraph) -> None:
        driver = {"rng": self.rng.getstate()}
        await graph.learner.save_checkpoint.remote({"driver": driver, "buffer": await graph.buffer.state_dict.remote()})

    def _console_line(self, graph: ProducerGraph, out: dict[str, Any], batch: dict[str, float]) -> str:
        best = self.tally.best_speedup()
        return (f"step {self.step:4d} v{self.version:<4d} | reward {batch.get('rollout/reward_mean', 0.0):6.3f} "
                f"| correct {batch.get('rollout/correct_rate', 0.0):4.2f} compiled {batch.get('rollout/compile_rate', 0.0):4.2f} "
                f"| best {f'{best:.2f}x' if best else '-':>6} | stale {out['learner/staleness_mean']:.1f} "
                f"| loss {out['learner/loss']:+.4f} clip {out['learner/clip_fraction']:.3f} "
                f"| queues gen {graph.generators.waiting} compile {graph.compilers.waiting} time {graph.timers.waiting} "
                f"| {(time.monotonic() - self.t0) / max(self.step - self._start_step, 1):.0f} s/step wall, learner {out['learner/step_s']:.1f} s")

    # ---- the end --------------------------------------------------------------------------------
    async def _summary(self, graph: ProducerGraph) -> dict[str, Any]:
        summary = await super()._summary(graph)
        hist = self._history
        third = max(1, len(hist) // 3)
        trend = {"first_steps_reward": statistics.fmean(h["reward"] for h in hist[:third]) if hist else None,
                 "last_steps_reward": statistics.fmean(h["reward"] for h in hist[-third:]) if hist else None}
        wall = max(time.monotonic() - self.t0, 1e-9)
        return {**summary, "steps": self.step, "version": self.version, "resumed_from": self.resumed_from,
                "reward_trend": trend, "history": hist,
                "learner_idle_ratio": self._learner_wait_s / wall,
                "steps_per_hour": self._steps_per_hour(wall),
                "weight_sync_s_median": statistics.median(self._weight_sync_s) if self._weight_sync_s else None,
                "best_kernels": self.archive.summary(), "heldout": self.heldout}
