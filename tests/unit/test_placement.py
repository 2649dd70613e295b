"""Where the producer graph's actors go, planned without starting Ray: one bundle per actor on a
named node, one timer per GPU, compile workers where the cores are, and errors that name what is
missing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rl_kernels.config import ConfigError, load_config
from rl_kernels.placement import NodeSpec, PlacementError, demands, plan_placement

ROOT = Path(__file__).resolve().parents[2]


def _gpu_cfg(*overrides: str):
    return load_config(None, ["eval.backend=cuda", "policy.device=cuda", "cluster.generator_num_gpus=1",
                              "learner.device=cuda", "learner.num_gpus=1", *overrides])


def _used_gpus(plan) -> dict[tuple[str, int], float]:
    used: Counter = Counter()
    for s in plan.slots:
        for g in s.gpus:
            used[(s.node, g)] += s.demand.gpus / len(s.gpus)
    return dict(used)


def test_demands_count_every_actor_that_holds_resources() -> None:
    cpu = load_config(None, ["cluster.num_generators=2", "cluster.num_compilers=3", "cluster.num_timers=1"])
    assert Counter(d.role for d in demands(cpu, learner=True)) == {"learner": 1, "generator": 2, "timer": 1, "compiler": 3}
    assert sum(d.cpus for d in demands(cpu, learner=False)) == 6 and sum(d.gpus for d in demands(cpu, learner=False)) == 0
    gpu = _gpu_cfg("cluster.num_timers=4", "cluster.num_compilers=8")
    d = demands(gpu, learner=True)
    assert sum(x.gpus for x in d) == 6            # learner + generator + 4 timers, a whole GPU each
    assert sum(x.cpus for x in d) == 14           # and a core each: the timers' too


def test_one_node_of_eight_gpus_gives_every_gpu_to_exactly_one_actor() -> None:
    cfg = load_config(ROOT / "configs" / "h100x8.yaml", [])
    plan = plan_placement(cfg, [NodeSpec("h100-0", 128, 8)], learner=True)
    used = _used_gpus(plan)
    assert sorted(used) == [("h100-0", g) for g in range(8)] and set(used.values()) == {1.0}
    assert len(plan.of("timer")) == 4 and all(len(s.gpus) == 1 for s in plan.of("timer"))
    assert len(plan.of("compiler")) == 96 and all(not s.gpus for s in plan.of("compiler"))
    assert plan.totals()["CPU"] <= 128
    assert [s.bundle for s in plan.slots] == list(range(len(plan.slots)))
    assert len(plan.bundles()) == len(plan.slots) and plan.bundles()[0] == {"CPU": 1.0, "GPU": 1.0}


def test_two_nodes_share_timers_generators_and_compile_workers() -> None:
    cfg = load_config(ROOT / "configs" / "h100x8x2.yaml", [])
    nodes = [NodeSpec("a", 128, 8, node_id="id-a"), NodeSpec("b", 128, 8, node_id="id-b")]
    plan = plan_placement(cfg, nodes, learner=True)
    used = _used_gpus(plan)
    assert len(used) == 16 and set(used.values()) == {1.0}     # 16 GPUs, none shared
    per_node = Counter((s.node, s.demand.role) for s in plan.slots)
    assert per_node[("a", "timer")] == per_node[("b", "timer")] == 5
    assert per_node[("a", "compiler")] + per_node[("b", "compiler")] == 192
    assert abs(per_node[("a", "compiler")] - per_node[("b", "compiler")]) <= 1   # where the cores are
    for n in nodes:
        assert sum(s.demand.cpus for s in plan.slots if s.node == n.name) <= n.cpus
    assert set(plan.node_ids()) == {"id-a", "id-b"}
    text = plan.render()
    assert "node a:" in text and "compile workers on b: 96" in text and "learner 0" in text


def test_compile_workers_go_to_the_node_with_the_free_cores() -> None:
    cfg = _gpu_cfg("cluster.num_timers=2", "cluster.num_compilers=10")
    plan = plan_placement(cfg, [NodeSpec("gpu", 8, 4), NodeSpec("cpu-only", 16, 0)], learner=True)
    assert all(s.node == "gpu" for s in plan.slots if s.demand.gpus)
    compilers = Counter(s.node for s in plan.of("compiler"))
    assert compilers["cpu-only"] >= 8 and sum(compilers.values()) == 10


def test_a_shared_device_splits_one_gpu_between_learner_generator_and_timer() -> None:
    cfg = load_config(ROOT / "configs" / "h200_train.yaml", [])
    plan = plan_placement(cfg, [NodeSpec("h200", 16, 1)], learner=True)
    assert {s.gpus for s in plan.slots if s.demand.gpus} == {(0,)}
    assert _used_gpus(plan)[("h200", 0)] == pytest.approx(1.0)
    assert "(0.3)" in plan.render()


def test_a_graph_that_does_not_fit_names_the_actor_and_what_is_missing() -> None:
    cfg = load_config(ROOT / "configs" / "h100x8.yaml", ["cluster.num_timers=6"])
    with pytest.raises(PlacementError, match=r"timer 4 needs 1 CPU\(s\) and 1 GPU\(s\).*missing 2 GPUs"):
        plan_placement(cfg, [NodeSpec("h100-0", 128, 8)], learner=True)
    with pytest.raises(PlacementError, match="missing 3 CPUs"):    # 4 compilers + 3 actors on 4 CPUs
        plan_placement(load_config(None, ["cluster.num_compilers=4"]), [NodeSpec("small", 4, 0)], learner=True)
    # Enough in all, but no node holds a 2-GPU learner in one piece.
    big = _gpu_cfg("learner.num_gpus=2", "cluster.num_generators=1", "cluster.num_timers=1", "cluster.num_compilers=1")
    with pytest.raises(PlacementError, match="learner 0 needs 1 CPU.*2 GPU.*no node has it left in one piece"):
        plan_placement(big, [NodeSpec(name, 8, 1) for name in "abcd"], learner=True)


def test_described_nodes_must_be_named_once() -> None:
    with pytest.raises(ConfigError, match="own name"):
        load_config(None, ["cluster.nodes=[{name: a, cpus: 8}, {name: a, cpus: 8}]"])
    with pytest.raises(ConfigError, match="empty"):
        load_config(None, ["cluster.nodes=[]"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "rl_kernels.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def test_dry_run_prints_the_plan_or_the_reason_it_cannot_be_placed() -> None:
    out = _cli("train", "--config", "configs/h100x8x2.yaml", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "placement: 208 bundles on 2 node(s)" in out.stdout
    assert "compile workers on h100-1: 96" in out.stdout and "timer 9" in out.stdout
    bad = _cli("train", "--config", "configs/h100x8.yaml", "--dry-run", "cluster.num_timers=5")
    assert bad.returncode == 2 and "timer 4 needs" in bad.stderr and "missing 1 GPUs" in bad.stderr
    local = _cli("rollout", "--dry-run", "cluster.num_compilers=3")          # this machine, no learner
    assert local.returncode == 0 and "3 compile worker(s)" in local.stdout and "learner" not in local.stdout.split("placement:")[1]


def test_cpu_timers_get_disjoint_core_sets() -> None:
    from rl_kernels.cluster.graph import timer_configs

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    cfgs = timer_configs(load_config(None, ["cluster.num_timers=2"]))
    sets = [set(c.timing.cpu_cores) for c in cfgs]
    assert sets[0] and sets[1] and not sets[0] & sets[1] and sets[0] | sets[1] == set(cores)
    with pytest.raises(PlacementError, match="cpu_cores"):
        timer_configs(load_config(None, ["cluster.num_timers=2", "eval.timing.cpu_cores=[0]"]))
    with pytest.raises(PlacementError, match="core each"):
        timer_configs(load_config(None, [f"cluster.num_timers={len(cores) + 1}"]))
    one = timer_configs(load_config(None, []))
    assert len(one) == 1 and one[0].timing.cpu_cores is None
