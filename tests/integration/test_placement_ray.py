"""The placement plan on a real multi-node Ray cluster (three raylets on this machine, with a custom
resource standing in for GPUs): every bundle is reserved on the node the plan named, an actor on
a bundle gets exactly its slot's resources, and a plan Ray cannot reserve fails with the plan."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

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
