"""Batch assembly: which completions count, their advantages, the token denominator, and the padded
layout the trainer gathers logprobs from."""

from __future__ import annotations

import pytest
import torch

from rl_kernels.config import GrpoConfig, RewardConfig
from rl_kernels.learner.batch import BatchError, assemble_batch, micro_batches
from rl_kernels.trajectories import Group, Trajectory
from rl_kernels.types import Measurement


def _group(gid: str, rewards: list[float], *, version: int = 0, prompt: list[int] | None = None,
           lengths: list[int] | None = None, truncated: set[int] = frozenset()) -> Group:
    lengths = lengths or [3] * len(rewards)
    trajs = [Trajectory(index=i, completion="", source=None, reward=r, token_ids=[10 + i] * n,
                        logprobs=[-0.5] * n, truncated=i in truncated)
             for i, (r, n) in enumerate(zip(rewards, lengths))]
    return Group(group_id=gid, task_id="t", policy_version=version, trajectories=trajs,
                 prompt_token_ids=prompt if prompt is not None else [1, 2])


def test_advantages_masks_and_denominator() -> None:
    groups = [_group("a", [1.0, 0.0, 0.5], lengths=[2, 3, 4], truncated={2}, version=3),
              _group("b", [0.2, 0.2, 0.2], version=4)]          # zero variance: dropped
    batch = assemble_batch(groups, learner_version=5)
    # group a: mean 0.5 -> advantages +0.5, -0.5, 0.0; the truncated third completion is masked
    assert [s.advantage for s in batch.samples] == [0.5, -0.5]
    assert [len(s.completion_ids) for s in batch.samples] == [2, 3]
    assert batch.global_tokens == 5
    assert (batch.dropped_groups, batch.truncated, batch.groups, batch.completions) == (1, 1, 2, 6)
    assert batch.staleness == [2, 1]
    assert batch.rewards == [1.0, 0.0, 0.5, 0.2, 0.2, 0.2]


def test_group_std_scaling() -> None:
    batch = assemble_batch([_group("a", [1.0, 0.0])], 0, GrpoConfig(std_scaling="group"))
    std = torch.tensor([1.0, 0.0]).std().item()   # sample std, as torch computes it
    assert [s.advantage for s in batch.samples] == pytest.approx([0.5 / std, -0.5 / std], rel=1e-5)


def _scored(task_rewards: list[tuple[float, bool]]) -> Group:
    """A group whose completions carry measurements: (training reward, earned the correct reward)."""
    g = _group("m", [r for r, _ in task_rewards])
    for t, (r, ok) in zip(g.trajectories, task_rewards):
        t.measurement = Measurement(task="t", backend="cpu", mode="module", compiled=True, correct=ok,
                                    speedup=1.0 if ok else None, reward=r)
    return g


def test_decoupled_batch_splits_each_reward_at_the_correct_base() -> None:
    # correct_base 3: rewards 3.2 and 2.8 are correct kernels 0.2 apart in ln(speedup); 0.03 failed.
    grpo, reward = GrpoConfig(advantages="decoupled"), RewardConfig(correct_base=3.0, compile_reward=0.03)
    batch = assemble_batch([_scored([(3.2, True), (2.8, True), (0.03, False), (0.03, False)])], 0, grpo, reward)
    gate_mean = 6.06 / 4
    assert [s.advantage for s in batch.samples] == pytest.approx(
        [3 - gate_mean + 0.2, 3 - gate_mean - 0.2, 0.03 - gate_mean, 0.03 - gate_mean])
    assert batch.speed_groups == 1
    plain = assemble_batch([_scored([(3.2, True), (2.8, True), (0.03, False), (0.03, False)])], 0)
    assert plain.speed_groups == 0
    assert [s.advantage for s in plain.samples] == pytest.approx([3.2 - 1.515, 2.8 - 1.515, 0.03 - 1.515, 0.03 - 1.515])


def test_layout_points_each_completion_token_at_the_logit_that_predicts_it() -> None:
    groups = [_group("a", [1.0, 0.0], prompt=[7, 8, 9], lengths=[1, 4]),
              _group("b", [0.0, 1.0], prompt=[5], lengths=[2, 2])]
    batch = assemble_batch(groups, learner_version=0)
    mbs = micro_batches(batch.samples, size=3, pad_id=0)
    assert [mb.input_ids.size(0) for mb in mbs] == [3, 1]
    for mb in mbs:
        for i in range(mb.input_ids.size(0)):
            n = int(mb.mask[i].sum())
            for j in range(n):
                pos = int(mb.positions[i, j])
                # the token after position `pos` in the row is completion token j
                assert int(mb.input_ids[i, pos + 1]) == int(mb.targets[i, j])
                assert mb.attention_mask[i, pos + 1] == 1
            assert mb.attention_mask[i].sum() == mb.positions[i, 0] + 1 + n
    # longest rows first: prompt 3 + completion 4 leads
    assert mbs[0].input_ids[0, :7].tolist() == [7, 8, 9, 11, 11, 11, 11]
    assert sorted(float(a) for mb in mbs for a in mb.advantages) == [-0.5, -0.5, 0.5, 0.5]


def test_bad_groups_are_named() -> None:
    with pytest.raises(BatchError, match="no prompt_token_ids"):
        assemble_batch([_group("a", [1.0, 0.0], prompt=[])], 0)
    with pytest.raises(BatchError, match="same number"):
        assemble_batch([_group("a", [1.0, 0.0]), _group("b", [1.0, 0.0, 0.0])], 0)
    bad = _group("c", [1.0, 0.0])
    bad.trajectories[0].logprobs.pop()
    with pytest.raises(BatchError, match="group c completion 0: 3 tokens but 2"):
        assemble_batch([bad], 0)
    with pytest.raises(BatchError, match="at least one group"):
        assemble_batch([], 0)
