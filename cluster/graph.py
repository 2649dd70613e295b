"""Builds the producer graph from config: Ray, then the buffer, compile pool, timers and generators.

Every count comes from `cluster.*`; the resources each actor needs are checked against the cluster
before any actor is created, so a config that cannot be placed fails at once with the numbers
instead of leaving actors pending forever.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

import ray

from rl_kernels.actors.buffer import ReplayBufferActor
from rl_kernels.actors.compiler import CompilerActor
from rl_kernels.actors.generator import GeneratorActor, generator_options
from rl_kernels.actors.learner import LearnerActor, learner_options
from rl_kernels.actors.timer import TimerActor, timer_options
from rl_kernels.cluster.pools import ActorPool
from rl_kernels.config import Config, EvalConfig
from rl_kernels.host_share import host_share

log = logging.getLogger(__name__)


class PlacementError(RuntimeError):
    """The configured actors do not fit the Ray cluster's resources."""


@dataclass
class ProducerGraph:
    buffer: Any
    generators: ActorPool
    compilers: ActorPool
    timers: ActorPool
    timer_configs: list[EvalConfig]
    learner: Any | None = None     # train mode only

    def all_actors(self) -> list[Any]:
        learner = [self.learner] if self.learner is not None else []
        return [self.buffer, *self.generators.actors, *self.compilers.actors, *self.timers.actors, *learner]


def required_resources(cfg: Config, *, learner: bool = False) -> dict[str, float]:
    """CPUs and GPUs the graph holds while it runs (the buffer holds none; the learner, in train
    mode, one CPU and `learner.num_gpus`)."""
    c = cfg.cluster
    timer_gpus = shared_timer_gpus(cfg, learner=learner) if cfg.eval.backend == "cuda" else 0.0
    cpus = c.num_generators + c.num_compilers + (c.num_timers if cfg.eval.backend == "cpu" else 0) + learner
    gpus = c.num_generators * c.generator_num_gpus + c.num_timers * timer_gpus
    return {"CPU": float(cpus), "GPU": gpus + (cfg.learner.num_gpus if learner else 0.0)}


def shared_timer_gpus(cfg: Config, *, learner: bool) -> float:
    """A timer's GPU share: a whole device, or on a shared device (single-GPU smoke runs) what the
    generator and, in train mode, a learner on the GPU leave of it."""
    if not cfg.eval.shared_device:
        return 1.0
    share = 1.0 - cfg.cluster.generator_num_gpus - (cfg.learner.num_gpus if learner else 0.0)
    if share <= 0:
        raise PlacementError(f"eval.shared_device: cluster.generator_num_gpus={cfg.cluster.generator_num_gpus}"
                             + (f" + learner.num_gpus={cfg.learner.num_gpus}" if learner else "")
                             + " leave no GPU share for the timer")
    return share


def start_ray(cfg: Config, *, learner: bool = False) -> bool:
    """Join `cluster.ray_address`, or start a local Ray sized for the graph. Returns True when this
    process started Ray (and so must shut it down)."""
    if ray.is_initialized():
        return False
    if cfg.cluster.ray_address:
        ray.init(address=cfg.cluster.ray_address, log_to_driver=False)
        return True
    need = required_resources(cfg, learner=learner)["CPU"] + 1   # + the buffer's scheduling slot
    cores = os.cpu_count() or 1
    num_cpus = cfg.cluster.num_cpus or max(cores, int(need))
    if num_cpus > cores:
        log.warning("local Ray gets %d logical CPUs on %d cores: the actors share cores (timings on the "
                    "cpu backend are then taken on a shared device)", num_cpus, cores)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    return True


def check_placement(cfg: Config, *, learner: bool = False) -> None:
    have = ray.cluster_resources()
    need = required_resources(cfg, learner=learner)
    short = {k: (v, have.get(k, 0.0)) for k, v in need.items() if v > have.get(k, 0.0) + 1e-9}
    if short:
        detail = ", ".join(f"{k}: need {v:g}, the cluster has {h:g}" for k, (v, h) in short.items())
        raise PlacementError(
            f"the producer graph does not fit ({detail}); with cluster.num_generators="
            f"{cfg.cluster.num_generators}, num_compilers={cfg.cluster.num_compilers}, "
            f"num_timers={cfg.cluster.num_timers} (one device each on cuda), "
            f"generator_num_gpus={cfg.cluster.generator_num_gpus}"
            + (f", learner.num_gpus={cfg.learner.num_gpus}" if learner else ""))


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


async def build_graph(cfg: Config, *, learner: bool) -> ProducerGraph:
    """Create every actor and wait until each is ready (model loaded, device locked)."""
    check_placement(cfg, learner=learner)
    c = cfg.cluster
    buffer = ReplayBufferActor.options(max_restarts=0).remote(
        # The staleness unit is the groups consumed per published version.
        str(cfg.run_dir), cfg.rollout.max_staleness,
        cfg.rollout.batch_groups * (cfg.learner.publish_every if learner else 1), filter_zero_variance=cfg.rollout.filter_zero_variance, learner=learner)
    compilers = [CompilerActor.options(max_restarts=c.compiler_max_restarts, max_task_retries=0).remote(cfg.eval)
                 for _ in range(c.num_compilers)]
    tcfgs = timer_configs(cfg)
    timers = []
    for tcfg in tcfgs:
        opts = timer_options(tcfg, max_restarts=c.timer_max_restarts)
        if cfg.eval.backend == "cuda" and cfg.eval.shared_device:
            opts["num_gpus"] = shared_timer_gpus(cfg, learner=learner)
        timers.append(TimerActor.options(**opts).remote(tcfg))
    generators = [GeneratorActor.options(**generator_options(c, cfg.policy)).remote(
        cfg.policy, cfg.rollout.max_staleness + 2, host_share(cfg.eval)) for _ in range(c.num_generators)]
    trainer = None
    if learner:
        # Adapters on disk: what generators may still need (max_staleness + 2 versions, as they keep).
        trainer = LearnerActor.options(**learner_options(cfg)).remote(cfg, cfg.rollout.max_staleness + 2)
    extra = [trainer] if trainer is not None else []
    pings = [buffer.stats.remote()] + [a.ready.remote() for a in [*compilers, *timers, *generators, *extra]]
    await asyncio.wait_for(asyncio.gather(*pings), max(c.ready_timeout_s, cfg.train.ready_timeout_s if learner else 0))
    return ProducerGraph(buffer=buffer, generators=ActorPool("generate", generators),
                         compilers=ActorPool("compile", compilers), timers=ActorPool("time", timers),
                         timer_configs=tcfgs, learner=trainer)


def kill_graph(graph: ProducerGraph) -> None:
    for actor in graph.all_actors():
        ray.kill(actor, no_restart=True)
