"""How the producer graph is sized and placed, checked without starting Ray: resources per actor
kind, one core set per cpu timer, and clear errors for configs that cannot be placed."""

from __future__ import annotations

import os

import pytest

from rl_kernels.cluster.graph import PlacementError, required_resources, timer_configs
from rl_kernels.config import load_config


def test_resources_count_every_actor_that_holds_one() -> None:
    cpu = load_config(None, ["cluster.num_generators=2", "cluster.num_compilers=3", "cluster.num_timers=1"])
    assert required_resources(cpu) == {"CPU": 6.0, "GPU": 0.0}
    gpu = load_config(None, ["eval.backend=cuda", "policy.device=cuda", "cluster.generator_num_gpus=1",
                             "cluster.num_timers=4", "cluster.num_compilers=8"])
    assert required_resources(gpu) == {"CPU": 9.0, "GPU": 5.0}   # timers hold a GPU, not a CPU
    shared = load_config(None, ["eval.backend=cuda", "policy.device=cuda", "cluster.generator_num_gpus=0.5",
                                "eval.shared_device=true"])
    assert required_resources(shared)["GPU"] == 1.0                # one GPU split between the two


def test_cpu_timers_get_disjoint_core_sets() -> None:
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
