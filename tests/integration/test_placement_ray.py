"""The placement plan on a real multi-node Ray cluster (three raylets on this machine, with a custom
resource standing in for GPUs): every bundle is reserved on the node the plan named, an actor on
a bundle gets exactly its slot's resources, and a plan Ray cannot reserve fails with the plan."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util import placement_group_table, remove_placement_group  # noqa: E402

from rl_kernels.cluster.graph import _on, live_nodes, reserve  # noqa: E402
from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.placement import PlacementError, plan_placement  # noqa: E402


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[Cluster]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=3, resources={"sim_gpu": 2})
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@ray.remote
class Probe:
    def where(self) -> tuple[str, dict[str, float]]:
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ctx.get_assigned_resources()


def test_bundles_are_reserved_on_the_planned_nodes(three_nodes: Cluster) -> None:
    cfg = load_config(None, ["eval.backend=cuda", "policy.device=cuda", "cluster.generator_num_gpus=1",
                             "cluster.gpu_resource=sim_gpu", "cluster.num_generators=1", "cluster.num_timers=3",
                             "cluster.num_compilers=3"])
    nodes = live_nodes(cfg)
    assert sorted(n.gpus for n in nodes) == [0, 2, 2] and sorted(n.cpus for n in nodes) == [1, 3, 3]
    plan = plan_placement(cfg, nodes, learner=False)
    pg = asyncio.run(reserve(plan, 60))
    try:
        table = placement_group_table(pg)
        assert [table["bundles_to_node_id"][i] for i in range(len(plan.slots))] == plan.node_ids()
        gpu_nodes = {n.node_id for n in nodes if n.gpus}
        assert {table["bundles_to_node_id"][s.bundle] for s in plan.of("timer")} == gpu_nodes   # one timer per sim GPU left
        for slot in (plan.of("timer")[0], plan.of("compiler")[0]):
            node, got = ray.get(Probe.options(**_on(pg, slot, "sim_gpu")).remote().where.remote(), timeout=60)
            assert node == plan.node_ids()[slot.bundle]
            assert got.get("CPU", 0) == slot.demand.cpus and got.get("sim_gpu", 0) == slot.demand.gpus
        with pytest.raises(PlacementError, match="did not reserve the planned bundles within 2 s"):
            asyncio.run(reserve(plan, 2))        # the first group holds every sim GPU
    finally:
        remove_placement_group(pg)


def test_dry_run_plans_for_the_running_cluster(three_nodes: Cluster) -> None:
    """`--dry-run` with `cluster.ray_address` reads the running cluster's nodes (its own process
    connects, reads and leaves) and plans on them; nothing is reserved."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "rl_kernels.cli", "rollout", "--dry-run", "eval.backend=cuda",
                          "policy.device=cuda", "cluster.generator_num_gpus=1", "cluster.gpu_resource=sim_gpu",
                          "cluster.num_timers=3", "cluster.num_compilers=2", f"cluster.ray_address={three_nodes.address}"],
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2], env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    plan = out.stdout.split("placement:")[1]
    assert "on 3 node(s)" in plan and "timer 2" in plan and "4 GPUs (Ray resource 'sim_gpu')" in plan
    states = {pg["state"] for pg in placement_group_table().values()}
    assert states <= {"REMOVED"}, states                # a dry run reserves nothing
