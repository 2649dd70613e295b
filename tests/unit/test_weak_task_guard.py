"""The advantage guard of a weak task: a group made while its task was weak weighs its speed part by
`grpo.weak_task_speed_weight` (0 by default), so none of its correct kernels is pushed down for being
slower than another, while the other groups of the batch keep `grpo.speed_weight`."""

from __future__ import annotations

import pytest
import torch

from rl_kernels.config import GrpoConfig, RewardConfig
from rl_kernels.evaluation.reward import correct_reward
from rl_kernels.learner.batch import assemble_batch, speed_weights
from rl_kernels.learner.grpo import decoupled_advantages
from rl_kernels.trajectories import WEAK_TASK
from rl_kernels.trajectories import Group, Trajectory
from rl_kernels.types import Measurement

REWARD = RewardConfig(correct_base=3.0, compile_reward=0.03, format_reward=0.01)
# scale_bias_relu's group at v6 of the speed_weight=2 run: three correct kernels 1% apart, five failures
SPEEDUPS = [None, 1.85, 1.83, None, None, 1.85, None, None]


def _group(gid: str, weak: bool | None) -> Group:
    trajs = []
    for i, s in enumerate(SPEEDUPS):
        m = Measurement(task="builtin/scale_bias_relu", backend="cpu", mode="module", compiled=s is not None,
                        correct=s is not None, speedup=s, reward=correct_reward(s, REWARD) if s else 0.0)
        trajs.append(Trajectory(index=i, completion="", source="x", measurement=m, token_ids=[7, 8],
                                logprobs=[-0.1, -0.2], reward=m.reward if s else REWARD.format_reward))
    extra = {} if weak is None else {WEAK_TASK: weak}
    return Group(group_id=gid, task_id="builtin/scale_bias_relu", policy_version=0, trajectories=trajs,
                 extra=extra, prompt_token_ids=[1, 2])


def test_a_weak_tasks_correct_kernels_are_all_pushed_up_by_correctness() -> None:
    grpo = GrpoConfig(advantages="decoupled", std_scaling="group", speed_weight=2.0)
    batch = assemble_batch([_group("healthy", False), _group("weak", True), _group("old", None)], 0, grpo, REWARD)
    adv = torch.tensor([s.advantage for s in batch.samples]).view(3, 8)           # [groups, G]
    correct = torch.tensor([s is not None for s in SPEEDUPS])                      # [G]
    healthy, weak, unstamped = adv
    # speed weighted 2: the 1.83x kernel falls below the failures it beat
    assert healthy[2] < healthy[~correct].max()
    assert weak[correct].tolist() == pytest.approx([weak[1].item()] * 3) and weak[1] > 0
    assert weak[~correct].max() < 0
    assert unstamped.tolist() == pytest.approx(healthy.tolist())                  # groups written before the flag
    assert (batch.groups, batch.dropped_groups, batch.speed_groups) == (3, 0, 2)
    assert speed_weights([_group("a", True), _group("b", False)], grpo).tolist() == [0.0, 2.0]


def test_per_group_speed_weights_and_a_zero_weight_speed_only_group_is_dropped() -> None:
    # group 1 all correct (speed is its only signal), group 2 one failure and two speeds, both as [B]
    gate = torch.tensor([3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 0.0])
    speed = torch.tensor([0.1, 0.0, 0.0, 0.1, 0.2, 0.0, 0.0, 0.0])
    correct = torch.tensor([1, 1, 1, 1, 1, 1, 1, 0], dtype=torch.bool)
    both = decoupled_advantages(gate, speed, correct, 4, "none", torch.tensor([0.0, 1.0]))
    assert both.advantages.shape == (8,) and both.keep.shape == (8,)
    assert both.keep.tolist() == [False] * 4 + [True] * 4 and both.dropped_groups == 1 and both.speed_groups == 1
    assert both.advantages[:4].tolist() == [0.0] * 4
    speed_mean, gate_mean = 0.2 / 3, 9.0 / 4
    assert both.advantages[4:].tolist() == pytest.approx(
        [3 - gate_mean + 0.2 - speed_mean, 3 - gate_mean - speed_mean, 3 - gate_mean - speed_mean, -gate_mean])
    one = decoupled_advantages(gate, speed, correct, 4, "none", 1.0)
    assert one.advantages[4:].tolist() == pytest.approx(both.advantages[4:].tolist())
    assert one.speed_groups == 2 and one.advantages[0].item() == pytest.approx(0.05)
