"""The scale simulation's short form: the real train driver, replay buffer, staleness books,
placement group and actors on a two-node local Ray whose `sim_gpu` resource stands for 8 GPUs,
with the work inside the actors simulated (rl_kernels/simulation.py).  What must hold at any
scale: every group id in trajectories.jsonl once, every group the driver started accounted for,
no batch older than the staleness bound, and versions published as the learner steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import scale_sim  # noqa: E402


@pytest.mark.slow   # ~32 s on 2 cores; the simulation's books are the benchmark's, run with it
def test_eight_simulated_gpus_keep_the_books(tmp_path: Path) -> None:
    args = scale_sim.argparse.Namespace(time_scale=20.0, sim_minutes=4.0, gpus_per_node=4, overrides=[
        "cluster.simulate.build_s={median: 4.0, p90: 5.0}", "cluster.simulate.eval_s={median: 1.23, p90: 1.4}",
        "cluster.simulate.learner_tokens_per_s=100000"])
    row = scale_sim.run_point(8, 3, 6, 4, args, tmp_path)
    assert row["nodes"] == 2 and row["groups"] >= 8 and row["steps"] >= 2, row
    assert row["duplicated_groups"] == 0 and row["unaccounted_groups"] == 0, row
    assert row["max_staleness_trained"] <= row["staleness_bound"], row
    assert row["driver_cpu_s_per_group"] > 0 and row["bound"], row
    assert (tmp_path / "8gpu-3x6x4" / "adapters").is_dir()
