"""`rl-kernels compare` on Ray: policy versions of a run sampled on the same tasks with the same
prompts, seeds and budget through the real pipeline (generators, compile pool, timers), the way
train's held-out check samples (cluster/train.py `LearnStage._check_heldout`). No learner; nothing
is archived or trained on.

    plan (rl_kernels/comparison_plan.py)     made and printed by the caller before Ray starts
    graph (cluster/graph.py)                 generators, compile pool, timers; the replay buffer (which
                                             opens trajectories.jsonl and archive.sqlite where it lives)
                                             works in a scratch directory removed at the end: nothing
                                             is written to the run's trajectories or archive
    versions (cluster/versions.py)           every compared adapter published by path: a generator
                                             loads a version on first use
    prompts                                  plain, or the seed as the one exemplar with its archived
                                             speedup (measured now when the archive lacks it)
    every completion timed on its own        unless compare.measure_each is off (rollout.dedupe_group_sources)
    every (task, version) at once            the generator pool serves them in order (task by task,
                                             its versions side by side), so one cell's builds and timings
                                             overlap the next cell's sampling; a line per finished cell
    figures (rl_kernels/comparison.py)       RUN_DIR/compare/<name>.json and .md
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray

from rl_kernels.archive import KernelArchive, passed_every_gate
from rl_kernels.cluster.driver import select_tasks
from rl_kernels.cluster.graph import ProducerGraph, build_graph, kill_graph, start_ray
from rl_kernels.cluster.producer import GroupProducer
from rl_kernels.cluster.status import Console, GroupProgress, counted
from rl_kernels.cluster.versions import PolicyVersions
from rl_kernels.comparison import Outcome, compare_outcomes, outcome_of, task_baselines
from rl_kernels.comparison_plan import ComparePlan, archived_seed, compare_prompt, compare_sampling, plan_comparison
from rl_kernels.comparison_report import COMPARE_DIR, cell_line, write_comparison
from rl_kernels.config import Config, ConfigError
from rl_kernels.learner.publish import adapter_dir, published_versions
from rl_kernels.policy import Messages
from rl_kernels.prompts import Exemplar
from rl_kernels.tasks import load_suite
from rl_kernels.tasks.split import task_split
from rl_kernels.types import Task

# A task's prompt: its messages, the mode sent, the seed it shows and where the seed's speedup came from.
Prompt = tuple[Messages, str, Exemplar | None, str | None]


def make_plan(cfg: Config, *, versions: str | None, tasks: list[str] | None, heldout: bool,
              name: str | None) -> ComparePlan:
    """The plan for the run at `cfg.run_dir`: its training tasks (rollout.tasks, else the suite's
    training split) or, with `heldout`, the split's held-out tasks."""
    run = Path(cfg.run_dir)
    candidates = task_split(cfg.split).heldout(load_suite(cfg.suite)) if heldout else _training_tasks(cfg)
    published = {v: adapter_dir(run, v) for v in published_versions(run)}
    return plan_comparison(cfg, candidates, published, versions=versions, tasks=tasks, heldout=heldout, name=name)


def _training_tasks(cfg: Config) -> list[Task]:
    try:
        return select_tasks(cfg)
    except ValueError as exc:    # the run's rollout.tasks name tasks its suite lacks
        raise ConfigError(str(exc)) from None


def run_comparison(cfg: Config, plan: ComparePlan, console: Console) -> dict[str, Any]:
    """Sample, measure and compare (the module docstring); returns the summary, also written to
    RUN_DIR/compare/<name>.json with its table in <name>.md."""
    scratch = plan.run_dir / COMPARE_DIR / f".pipeline-{plan.name}"
    shutil.rmtree(scratch, ignore_errors=True)    # a crashed comparison's leftovers
    rollout = cfg.rollout.model_copy(update={"dedupe_group_sources": not cfg.compare.measure_each})
    pipeline_cfg = cfg.model_copy(update={"run_dir": scratch, "rollout": rollout})
    started_ray = start_ray(pipeline_cfg, learner=False)
    try:
        return asyncio.run(_compare(pipeline_cfg, plan, console))
    finally:
        if started_ray:
            ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


async def _compare(cfg: Config, plan: ComparePlan, console: Console) -> dict[str, Any]:
    t0 = time.monotonic()
    graph = await build_graph(cfg, learner=False, say=console.say)
    try:
        versions = PolicyVersions(keep=max(plan.versions) + 1)   # every compared version stays addressable
        for v, path in plan.adapters.items():
            if path is not None:
                versions.publish(v, path)
        producer = GroupProducer(cfg, graph, KernelArchive(Path(cfg.run_dir) / "archive.sqlite"), versions,
                                 random.Random(cfg.compare.seed), console=console)
        prompts = await _prompts(cfg, plan, producer, console)
        outcomes = await _sample_all(cfg, plan, producer, prompts, console, t0)
    finally:
        kill_graph(graph)
    baselines = {t.id: task_baselines(t, cfg.eval.baselines) for t in plan.tasks}
    figures = compare_outcomes(outcomes, [t.id for t in plan.tasks], plan.versions, baselines, cfg.compare)
    summary = {**_setting(cfg, plan, prompts), "wall_s": time.monotonic() - t0, **figures}
    summary["files"] = [str(p) for p in write_comparison(plan.run_dir, plan.name, summary)]
    return summary


def _setting(cfg: Config, plan: ComparePlan, prompts: dict[str, Prompt]) -> dict[str, Any]:
    """What was compared and how: the head of the JSON, so a reader can tell two comparisons apart."""
    versions = " vs ".join(f"v{v}" for v in plan.versions)
    return {"title": f"{versions} of {plan.run_dir}{' (held-out tasks)' if plan.heldout else ''}",
            "run_dir": str(plan.run_dir), "name": plan.name, "heldout": plan.heldout, "samples": plan.samples,
            "adapters": {v: str(p) if p else None for v, p in plan.adapters.items()},
            "policy": {"model": cfg.policy.model, "backend": cfg.policy.backend,
                       "init_adapter": str(cfg.policy.init_adapter) if cfg.policy.init_adapter else None},
            "eval_backend": cfg.eval.backend, "seeds": plan.seeds,
            "sampling": {k: v for k, v in asdict(compare_sampling(cfg, 0)).items() if k != "seed"},
            "prompts": {t: {"mode": mode, "seed_speedup": ex.speedup if ex else None, "seed_from": origin}
                        for t, (_, mode, ex, origin) in prompts.items()}}


async def _prompts(cfg: Config, plan: ComparePlan, producer: GroupProducer, console: Console) -> dict[str, Prompt]:
    """One prompt per task: plain, or contrastive with the seed kernel as the run's first prompts
    showed it (the archive's record of it; measured now through the pipeline when the archive lacks it)."""
    backend = cfg.eval.backend
    seeds: dict[str, tuple[Exemplar | None, str | None]] = {}
    if plan.prompt == "contrastive":
        for t in plan.tasks:
            ex = archived_seed(plan.run_dir / "archive.sqlite", t, backend)
            seeds[t.id] = (ex, "archive" if ex else None)
        lacking = [t for t in plan.tasks if seeds[t.id][0] is None and backend in t.seeds]
        if lacking:
            console.say(f"measuring the seed kernel of {counted(len(lacking), 'task')} the run's archive lacks "
                        "(the contrastive prompts' exemplar)")

            async def measured(task: Task) -> None:
                m = await producer.measure(task, task.seeds[backend])
                if passed_every_gate(m):
                    seeds[task.id] = (Exemplar(task.seeds[backend], m.speedup), "measured now")
                else:   # the run's start would have sent a plain prompt too
                    seeds[task.id] = (None, f"seed measured now: {m.rejected or 'flagged'}")

            await asyncio.gather(*(measured(t) for t in lacking))
    out = {}
    for t in plan.tasks:
        ex, origin = seeds.get(t.id, (None, None))
        messages, mode = compare_prompt(t, backend, plan.prompt, ex)
        out[t.id] = (messages, mode, ex, origin)
    return out


async def _sample_all(cfg: Config, plan: ComparePlan, producer: GroupProducer, prompts: dict[str, Prompt],
                      console: Console, t0: float) -> list[Outcome]:
    """Every (task, version) at once, with a line per finished one and status lines in the silences."""
    in_flight: dict[tuple[str, int], GroupProgress] = {}
    done: list[tuple[str, int]] = []

    async def cell(task: Task, version: int) -> list[Outcome]:
        progress = in_flight[task.id, version] = GroupProgress(task.id, version)
        params = compare_sampling(cfg, plan.seeds[task.id])
        completions = await producer.sample(prompts[task.id][0], params, version)
        progress.phase = "measuring"
        trajs = await producer.score(task, completions or [], progress)
        outcomes = [outcome_of(task.id, version, t.index, t.source, t.detail or None, t.measurement) for t in trajs]
        del in_flight[task.id, version]
        done.append((task.id, version))
        reference = task_baselines(task, cfg.eval.baselines)[0]
        console.say(cell_line(task.id, version, outcomes, reference, cfg.compare.fast_thresholds,
                              time.monotonic() - progress.started)
                    + ("" if completions is not None else " -- the generator died twice: no completions"))
        return outcomes

    total = len(plan.tasks) * len(plan.versions)
    stop = asyncio.Event()
    status = asyncio.create_task(_status(cfg, producer.graph, in_flight, done, total, console, t0, stop))
    try:
        cells = await asyncio.gather(*(cell(t, v) for t in plan.tasks for v in plan.versions))
    finally:
        stop.set()
        await status
    return [o for outcomes in cells for o in outcomes]


async def _status(cfg: Config, graph: ProducerGraph, in_flight: dict[tuple[str, int], GroupProgress],
                  done: list[tuple[str, int]], total: int, console: Console, t0: float, stop: asyncio.Event) -> None:
    """A line whenever `metrics.status_every_s` passed without one: a cell on the CPU takes minutes."""
    every = cfg.metrics.status_every_s
    if every <= 0:
        return
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), max(every - console.quiet_for(), 1.0))
        except asyncio.TimeoutError:
            pass
        if stop.is_set() or console.quiet_for() < every:
            continue
        now = time.monotonic()
        cells = "; ".join(f"{p.task_id} v{p.version} " + ("sampling" if p.phase == "sampling"
                                                           else f"measuring {p.measured}/{p.kernels} kernels")
                          for p in sorted(in_flight.values(), key=lambda p: p.started)[:3])
        console.say(f"compare status {now - t0:.0f}s: {len(done)} of {total} (task, version) done; "
                    f"{cells or 'none in flight'} | queues: generate {graph.generators.waiting}, "
                    f"compile {graph.compilers.waiting}, time {graph.timers.waiting}")
