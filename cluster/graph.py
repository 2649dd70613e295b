"""Builds the producer graph from config: Ray, the placement plan, then the buffer, compile pool,
timers, generators and (in train mode) the learner.

Every count comes from `cluster.*`. The plan (rl_kernels/placement.py) puts each actor on a node
of the live cluster before any actor is created; one placement group reserves every bundle, each
pinned to its planned node, so a config that cannot be placed fails at once with the numbers
instead of leaving actors pending forever.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.util import placement_group, remove_placement_group
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rl_kernels.actors.buffer import ReplayBufferActor
from rl_kernels.actors.compiler import CompilerActor
from rl_kernels.actors.generator import GeneratorActor, generator_options
from rl_kernels.actors.learner import LearnerActor, learner_options
from rl_kernels.actors.timer import TimerActor, timer_options
from rl_kernels.cluster.pools import ActorPool
from rl_kernels.cluster.status import counted
from rl_kernels.config import Config, EvalConfig
from rl_kernels.host_share import host_share
from rl_kernels.placement import NodeSpec, PlacementError, PlacementPlan, Slot, local_ray_cpus, plan_placement

log = logging.getLogger(__name__)
NODE_ID_LABEL = "ray.io/node-id"      # the label every Ray node carries: its node id


@dataclass
class ProducerGraph:
    buffer: Any
    generators: ActorPool
    compilers: ActorPool
    timers: ActorPool
    timer_configs: list[EvalConfig]
    plan: PlacementPlan
    placement_group: PlacementGroup
    learner: Any | None = None     # train mode only

    def all_actors(self) -> list[Any]:
        learner = [self.learner] if self.learner is not None else []
        return [self.buffer, *self.generators.actors, *self.compilers.actors, *self.timers.actors, *learner]


def start_ray(cfg: Config, *, learner: bool = False) -> bool:
    """Join `cluster.ray_address`, or start a local Ray sized for the graph. Returns True when this
    process started Ray (and so must shut it down)."""
    if ray.is_initialized():
        return False
    if cfg.cluster.ray_address:
        ray.init(address=cfg.cluster.ray_address, log_to_driver=False)
        return True
    cores = os.cpu_count() or 1
    num_cpus = local_ray_cpus(cfg, cores, learner=learner)
    if num_cpus > cores:
        log.warning("local Ray gets %d logical CPUs on %d cores: the actors share cores (timings on the "
                    "cpu backend are then taken on a shared device)", num_cpus, cores)
    custom = cfg.cluster.gpu_resource
    resources = {custom: float(_local_gpus(cfg))} if custom != "GPU" else None
    # address="local": a Ray of its own even when another one runs on this host (without it ray.init
    # joins that one and refuses num_cpus).
    ray.init(address="local", num_cpus=num_cpus, resources=resources, include_dashboard=False,
             log_to_driver=False)
    return True


def _local_gpus(cfg: Config) -> int:
    """The simulated GPUs a local Ray offers under a custom `cluster.gpu_resource`: the sum of
    `cluster.nodes`' GPUs (the machine the simulation stands in for)."""
    return sum(n.gpus for n in cfg.cluster.nodes or [])


def live_nodes(cfg: Config) -> list[NodeSpec]:
    """The running cluster's alive nodes, named by address and node id."""
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        out.append(NodeSpec(f"{n['NodeManagerAddress']}/{n['NodeID'][:6]}", float(res.get("CPU", 0.0)),
                            float(res.get(cfg.cluster.gpu_resource, 0.0)), n["NodeID"]))
    return out


def plan_for_running_cluster(cfg: Config, *, learner: bool) -> PlacementPlan:
    """The plan for the cluster at `cluster.ray_address`, made without starting any actor
    (`--dry-run`); this process connects only while it reads the nodes."""
    ray.init(address=cfg.cluster.ray_address, log_to_driver=False)
    try:
        return plan_placement(cfg, live_nodes(cfg), learner=learner)
    finally:
        ray.shutdown()


async def reserve(plan: PlacementPlan, timeout_s: float) -> PlacementGroup:
    """One placement group for the plan, every bundle pinned to its node; PlacementError with the
    plan when Ray cannot reserve it in time (other jobs hold part of what it needs)."""
    pg = placement_group(plan.bundles(), strategy="PACK",
                         bundle_label_selector=[{NODE_ID_LABEL: nid} for nid in plan.node_ids()])
    try:
        await asyncio.wait_for(pg.ready(), timeout_s)
    except asyncio.TimeoutError:
        remove_placement_group(pg)
        raise PlacementError(f"Ray did not reserve the planned bundles within {timeout_s:g} s "
                             "(cluster.placement_timeout_s): other jobs hold part of what they need. "
                             f"The plan:\n{plan.render()}") from None
    return pg


def _on(pg: PlacementGroup, slot: Slot, gpu_resource: str) -> dict[str, Any]:
    """An actor's resources and bundle: exactly what its slot reserved."""
    opts: dict[str, Any] = {"num_cpus": slot.demand.cpus,
                            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                                pg, placement_group_bundle_index=slot.bundle)}
    if gpu_resource == "GPU":
        opts["num_gpus"] = slot.demand.gpus
    else:
        opts["num_gpus"] = 0
        opts["resources"] = {gpu_resource: slot.demand.gpus} if slot.demand.gpus else {}
    return opts


def timer_configs(cfg: Config) -> list[EvalConfig]:
    """One evaluation config per timer. On the cpu backend each timer owns a disjoint core set (its
    device); on cuda Ray gives each timer its own GPU."""
    n = cfg.cluster.num_timers
    if cfg.eval.backend == "cuda" or n == 1:
        return [cfg.eval] * n
    if cfg.eval.timing.cpu_cores is not None:
        raise PlacementError("eval.timing.cpu_cores pins one core set, but cluster.num_timers="
                             f"{n} timers need one each: leave cpu_cores unset to split the cores")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n:
        raise PlacementError(f"cluster.num_timers={n} cpu timers need a core each; this machine has {len(cores)}")
    chunks = [cores[k::n] for k in range(n)]
    return [cfg.eval.model_copy(update={"timing": cfg.eval.timing.model_copy(update={"cpu_cores": c})})
            for c in chunks]


async def build_graph(cfg: Config, *, learner: bool, say: Callable[[str], None] = print) -> ProducerGraph:
    """Plan, reserve, create every actor on its bundle and wait until each is ready (model loaded,
    device locked); `say` gets the plan first, so a user sees where everything goes at once."""
    plan = plan_placement(cfg, live_nodes(cfg), learner=learner)
    say(plan.render())
    pg = await reserve(plan, cfg.cluster.placement_timeout_s)
    created: list[Any] = []
    try:
        return await _create(cfg, plan, pg, learner, created, say)
    except BaseException:
        for actor in created:            # nothing half-built keeps its bundle or its device lock
            ray.kill(actor, no_restart=True)
        remove_placement_group(pg)
        raise


async def _create(cfg: Config, plan: PlacementPlan, pg: PlacementGroup, learner: bool,
                  created: list[Any], say: Callable[[str], None]) -> ProducerGraph:
    c, res, sim = cfg.cluster, cfg.cluster.gpu_resource, cfg.cluster.simulate
    buffer = ReplayBufferActor.options(max_restarts=0).remote(
        # The staleness unit is the groups consumed per published version.
        str(cfg.run_dir), cfg.rollout.max_staleness,
        cfg.rollout.batch_groups * (cfg.learner.publish_every if learner else 1), filter_zero_variance=cfg.rollout.filter_zero_variance, learner=learner)
    compilers = [CompilerActor.options(max_restarts=c.compiler_max_restarts, max_task_retries=0,
                                       **_on(pg, slot, res)).remote(cfg.eval, sim)
                 for slot in plan.of("compiler")]
    tcfgs = timer_configs(cfg)
    timers = [TimerActor.options(**{**timer_options(tcfg, max_restarts=c.timer_max_restarts), **_on(pg, slot, res)}).remote(tcfg, simulate=sim)
              for tcfg, slot in zip(tcfgs, plan.of("timer"))]
    generators = [GeneratorActor.options(**{**generator_options(c, cfg.policy), **_on(pg, slot, res)}).remote(
        cfg.policy, cfg.rollout.max_staleness + 2, host_share(cfg.eval), sim) for slot in plan.of("generator")]
    trainer = None
    if learner:
        # Adapters on disk: what generators may still need (max_staleness + 2 versions, as they keep).
        trainer = LearnerActor.options(**{**learner_options(cfg), **_on(pg, plan.of("learner")[0], res)}).remote(
            cfg, cfg.rollout.max_staleness + 2)
    extra = [trainer] if trainer is not None else []
    created += [buffer, *compilers, *timers, *generators, *extra]
    roles = [("replay buffer", [buffer.stats.remote()]), ("compile worker", [a.ready.remote() for a in compilers]),
             ("timer", [a.ready.remote() for a in timers]), ("generator", [a.ready.remote() for a in generators]),
             ("learner", [a.ready.remote() for a in extra])]
    await asyncio.wait_for(_ready(roles, say), max(c.ready_timeout_s, cfg.train.ready_timeout_s if learner else 0))
    return ProducerGraph(buffer=buffer, generators=ActorPool("generate", generators, c.generator_slots),
                         compilers=ActorPool("compile", compilers), timers=ActorPool("time", timers),
                         timer_configs=tcfgs, plan=plan, placement_group=pg, learner=trainer)


async def _ready(roles: list[tuple[str, list[Any]]], say: Callable[[str], None]) -> None:
    """Waits for every actor's ready ping; a line per role when its last actor is up (a generator
    loading its model or starting its engine can take minutes: the user sees which one is left)."""
    t0 = time.monotonic()

    async def role(name: str, pings: list[Any]) -> None:
        await asyncio.gather(*pings)
        say(f"ready: {counted(len(pings), name)} ({time.monotonic() - t0:.0f} s)")

    await asyncio.gather(*(role(name, pings) for name, pings in roles if pings))


def kill_graph(graph: ProducerGraph) -> None:
    for actor in graph.all_actors():
        ray.kill(actor, no_restart=True)
    remove_placement_group(graph.placement_group)
