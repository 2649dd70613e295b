"""Where every actor of the producer graph runs: a plan of one bundle per actor, each on a named node.

The plan is made here, from the config and a list of nodes (a live Ray cluster's, or
`cluster.nodes` when none runs, as `--dry-run` does), before anything starts; `cluster/graph.py`
turns it into one Ray placement group whose bundles are pinned to the planned nodes, so the whole
graph is reserved at once or not at all.  A config the nodes cannot hold fails here, naming the
actor that did not fit and what every node had left.

Order of placement (the scarce resource first): the learner (its GPUs on one node), then the
generators, then one timer per remaining GPU (cuda) or core set (cpu), each on the node with the
most of what it needs left; compile actors are CPU-only and go, one at a time, to the node with the
most free cores after that.  GPU positions are numbered per node in planning order; Ray chooses
the physical device when the actor starts (a timer's `stats()` reports the one it got).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from rl_kernels.config import ClusterConfig, Config, LearnerConfig

Role = Literal["learner", "generator", "timer", "compiler"]
_ROLE_NAMES = {"learner": "learner", "generator": "generator(s)", "timer": "timer(s)", "compiler": "compile worker(s)"}
_EPS = 1e-9


class PlacementError(RuntimeError):
    """The configured actors do not fit the cluster's resources."""


@dataclass(frozen=True)
class NodeSpec:
    """One node the plan may use: its name in the plan, its cores and GPUs, and (on a live cluster)
    the Ray node id its bundles are pinned to."""

    name: str
    cpus: float
    gpus: float
    node_id: str | None = None


@dataclass(frozen=True)
class Demand:
    """What one actor holds while the graph runs (Ray's num_cpus and GPUs)."""

    role: Role
    index: int                 # the actor's number within its role
    cpus: float
    gpus: float


@dataclass(frozen=True)
class Slot:
    """One actor's bundle in the plan."""

    demand: Demand
    bundle: int                # index in the placement group
    node: str                  # NodeSpec.name
    gpus: tuple[int, ...]      # planned GPU positions on the node (a fraction shares a position)

    @property
    def label(self) -> str:
        return f"{self.demand.role} {self.demand.index}"


@dataclass
class _Free:
    spec: NodeSpec
    cpus: float
    gpu_left: list[float] = field(default_factory=list)   # capacity left of each GPU position

    @property
    def gpus(self) -> float:
        return sum(self.gpu_left)


@dataclass(frozen=True)
class PlacementPlan:
    nodes: tuple[NodeSpec, ...]
    slots: tuple[Slot, ...]
    gpu_resource: str          # the Ray resource that stands for a GPU ("GPU", or a simulated one)

    def bundles(self) -> list[dict[str, float]]:
        """The placement group's bundles, in slot order (a bundle asks for nothing it holds 0 of)."""
        return [{k: v for k, v in {"CPU": s.demand.cpus, self.gpu_resource: s.demand.gpus}.items() if v > 0}
                for s in self.slots]

    def node_ids(self) -> list[str | None]:
        """The Ray node id each bundle is pinned to (None: the plan is for described nodes)."""
        by_name = {n.name: n.node_id for n in self.nodes}
        return [by_name[s.node] for s in self.slots]

    def of(self, role: Role) -> list[Slot]:
        return [s for s in self.slots if s.demand.role == role]

    def totals(self) -> dict[str, float]:
        return {"CPU": sum(s.demand.cpus for s in self.slots), "GPU": sum(s.demand.gpus for s in self.slots)}

    def render(self) -> str:
        """The plan as a user reads it: per node what it holds, then one line per bundle."""
        total = self.totals()
        lines = [f"placement: {len(self.slots)} bundles on {len(self.nodes)} node(s); "
                 f"{total['CPU']:g} CPUs and {total['GPU']:g} GPUs (Ray resource {self.gpu_resource!r})"]
        for n in self.nodes:
            here = [s for s in self.slots if s.node == n.name]
            roles = Counter(s.demand.role for s in here)
            used_c = sum(s.demand.cpus for s in here)
            used_g = sum(s.demand.gpus for s in here)
            held = ", ".join(f"{roles[r]} {_ROLE_NAMES[r]}" for r in _ROLE_NAMES if roles[r]) or "nothing"
            lines.append(f"  node {n.name}: {held}; uses {used_c:g}/{n.cpus:g} CPUs, {used_g:g}/{n.gpus:g} GPUs")
        lines.append("  bundle  actor          node              GPU(s)  CPUs")
        for s in self.slots:
            if s.demand.role == "compiler":
                continue
            gpus = ",".join(str(g) for g in s.gpus) if s.gpus else "-"
            frac = "" if s.demand.gpus in (0, 1) or len(s.gpus) > 1 else f" ({s.demand.gpus:g})"
            lines.append(f"  {s.bundle:6d}  {s.label:<13}  {s.node:<16}  {gpus + frac:<6}  {s.demand.cpus:g}")
        for n in self.nodes:   # compile workers are interchangeable: one line per node
            mine = [s for s in self.slots if s.node == n.name and s.demand.role == "compiler"]
            if mine:
                lines.append(f"  compile workers on {n.name}: {len(mine)} (bundles {mine[0].bundle}-{mine[-1].bundle}), "
                             f"{mine[0].demand.cpus:g} CPU each, no GPU")
        return "\n".join(lines)


def generator_resources(cluster: ClusterConfig) -> tuple[float, float]:
    """(CPUs, GPUs) of a generator: a core, and `cluster.generator_num_gpus`."""
    return 1.0, cluster.generator_num_gpus


def learner_resources(learner: LearnerConfig) -> tuple[float, float]:
    """(CPUs, GPUs) of the learner: a core, and `learner.num_gpus` (on one node)."""
    return 1.0, learner.num_gpus


def timer_resources(backend: str) -> tuple[float, float]:
    """(CPUs, GPUs) of a timer: a core on either backend (its evaluation worker times from the host,
    and a core taken by builds would put their jitter into the launch overhead), and a whole GPU on
    cuda."""
    return (1.0, 1.0) if backend == "cuda" else (1.0, 0.0)


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


def demands(cfg: Config, *, learner: bool) -> list[Demand]:
    """Every actor that holds resources, in placement order (the buffer holds none and is not placed)."""
    c = cfg.cluster
    out: list[Demand] = []
    if learner:
        out.append(Demand("learner", 0, *learner_resources(cfg.learner)))
    out += [Demand("generator", i, *generator_resources(c)) for i in range(c.num_generators)]
    t_cpus, t_gpus = timer_resources(cfg.eval.backend)
    if cfg.eval.backend == "cuda":
        t_gpus = shared_timer_gpus(cfg, learner=learner)
    out += [Demand("timer", i, t_cpus, t_gpus) for i in range(c.num_timers)]
    out += [Demand("compiler", i, 1.0, 0.0) for i in range(c.num_compilers)]
    return out


def _take_gpus(free: _Free, amount: float) -> tuple[int, ...] | None:
    """GPU positions for `amount` on this node: whole free GPUs for >= 1, else the first GPU with
    room for the fraction; None when the node cannot hold it."""
    if amount <= 0:
        return ()
    if amount >= 1:
        whole = [i for i, left in enumerate(free.gpu_left) if left >= 1 - _EPS]
        if len(whole) < amount - _EPS:
            return None
        picked = tuple(whole[:int(round(amount))])
        for i in picked:
            free.gpu_left[i] = 0.0
        return picked
    for i, left in enumerate(free.gpu_left):
        if left >= amount - _EPS:
            free.gpu_left[i] = left - amount
            return (i,)
    return None


def plan_placement(cfg: Config, nodes: list[NodeSpec], *, learner: bool) -> PlacementPlan:
    """One bundle per actor on `nodes`; PlacementError naming the first actor that does not fit."""
    if not nodes:
        raise PlacementError("no nodes to place the actors on")
    free = [_Free(n, n.cpus, [1.0] * int(n.gpus + _EPS)) for n in nodes]
    slots: list[Slot] = []
    for d in demands(cfg, learner=learner):
        if d.gpus > 0:
            # GPU actors: the node with the most GPU capacity left (ties: most cores, then order).
            order = sorted(free, key=lambda f: (-f.gpus, -f.cpus))
        else:
            order = sorted(free, key=lambda f: -f.cpus)
        for f in order:
            if f.cpus < d.cpus - _EPS:
                continue
            gpus = _take_gpus(f, d.gpus)
            if gpus is None:
                continue
            f.cpus -= d.cpus
            slots.append(Slot(d, len(slots), f.spec.name, gpus))
            break
        else:
            raise PlacementError(_misfit(cfg, d, slots, free, learner))
    return PlacementPlan(tuple(nodes), tuple(slots), cfg.cluster.gpu_resource)


def _misfit(cfg: Config, d: Demand, placed: list[Slot], free: list[_Free], learner: bool) -> str:
    want = demands(cfg, learner=learner)
    need_c, need_g = sum(x.cpus for x in want), sum(x.gpus for x in want)
    have_c, have_g = sum(f.spec.cpus for f in free), sum(f.spec.gpus for f in free)
    left = "; ".join(f"{f.spec.name}: {f.cpus:g} CPUs, {f.gpus:g} GPUs free" for f in free)
    done = Counter(s.demand.role for s in placed)
    c = cfg.cluster
    asks = (f"The config asks for {'1 learner (learner.num_gpus=' + format(cfg.learner.num_gpus, 'g') + '), ' if learner else ''}"
            f"{c.num_generators} generator(s) (cluster.generator_num_gpus={c.generator_num_gpus:g}), "
            f"{c.num_timers} timer(s) ({'a GPU each' if cfg.eval.backend == 'cuda' else 'a core each'}), "
            f"{c.num_compilers} compiler(s) (a core each): {need_c:g} CPUs and {need_g:g} GPUs in all; "
            f"the nodes have {have_c:g} CPUs and {have_g:g} GPUs")
    short = []
    if need_c > have_c + _EPS:
        short.append(f"{need_c - have_c:g} CPUs")
    if need_g > have_g + _EPS:
        short.append(f"{need_g - have_g:g} GPUs")
    missing = f"missing {' and '.join(short)}" if short else "no node has it left in one piece"
    placed_txt = ", ".join(f"{n} {r}(s)" for r, n in done.items()) or "nothing"
    return (f"{d.role} {d.index} needs {d.cpus:g} CPU(s) and {d.gpus:g} GPU(s) on one node ({missing}); "
            f"placed before it: {placed_txt}; left: {left}. {asks}")


def local_ray_cpus(cfg: Config, cores: int, *, learner: bool) -> int:
    """Logical CPUs of a local Ray: `cluster.num_cpus`, else every core, or more when the graph
    (plus the buffer's scheduling slot) needs more (the actors then share cores)."""
    need = sum(d.cpus for d in demands(cfg, learner=learner)) + 1
    return cfg.cluster.num_cpus or max(cores, math.ceil(need))


def described_nodes(cfg: Config, cores: int, gpus: int, *, learner: bool) -> list[NodeSpec]:
    """The nodes a plan is made for without a live cluster: `cluster.nodes`, else this machine as
    a local Ray would see it."""
    if cfg.cluster.nodes:
        return [NodeSpec(n.name, float(n.cpus), float(n.gpus)) for n in cfg.cluster.nodes]
    return [local_node(cfg, cores, gpus, learner=learner)]


def local_node(cfg: Config, cores: int, gpus: int, *, learner: bool) -> NodeSpec:
    """This machine as a local Ray started by the job would see it: `local_ray_cpus` of its cores
    and every visible GPU."""
    return NodeSpec("local", float(local_ray_cpus(cfg, cores, learner=learner)), float(gpus))
