"""From scored groups to what the loss consumes: advantages per completion, then padded micro-batches.

Kept out of the trainer so the bookkeeping (which completions count, how many tokens the step
normalises by, how stale the batch is) is a pure function tested without a model.

Layout of one micro-batch (b sequences, L = longest prompt + completion, T = longest completion):
each row is prompt tokens then completion tokens, right-padded. The logit that predicts completion
token j of row i sits at position len(prompt_i) - 1 + j, which `positions` [b, T] holds, so the
trainer gathers exactly the completion's logprobs whatever the prompt lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_kernels.config import GrpoConfig, RewardConfig
from rl_kernels.evaluation.reward import split_training_reward
from rl_kernels.learner.grpo import GroupAdvantages, decoupled_advantages, group_advantages
from rl_kernels.trajectories import Group


class BatchError(ValueError):
    """Groups the learner cannot train on (missing prompt tokens, logprobs that do not match)."""


@dataclass(frozen=True)
class Sample:
    """One completion that contributes tokens to the loss."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]
    advantage: float


@dataclass(frozen=True)
class TrainBatch:
    samples: list[Sample]       # only completions whose tokens count (see assemble_batch)
    global_tokens: int          # completion tokens over every sample: the loss's denominator
    groups: int
    completions: int
    dropped_groups: int         # zero reward variance: no signal
    speed_groups: int           # groups whose correct kernels gave a speed signal (decoupled advantages)
    truncated: int              # hit max_new_tokens: masked (their reward still sets the group mean)
    staleness: list[int]        # per group: learner version - the version that sampled it
    rewards: list[float]        # every completion's reward, dropped groups included


def assemble_batch(groups: list[Group], learner_version: int, grpo: GrpoConfig = GrpoConfig(),
                   reward: RewardConfig = RewardConfig()) -> TrainBatch:
    """Advantages per group (learner/grpo.py, as `grpo.advantages` says), then keep the completions
    that teach something. `reward` is the evaluator's reward config, which says where a correct
    kernel's reward splits into its base and its speed term.

    A completion counts unless its group was dropped (all rewards equal), it was truncated (its
    reward judges an answer the model never finished: DAPO's overlong masking) or it is empty.
    Every group must have the same size (the policy's group_size).
    """
    if not groups:
        raise BatchError("a training batch needs at least one group")
    sizes = {len(g.trajectories) for g in groups}
    if len(sizes) != 1 or min(sizes) < 2:
        raise BatchError(f"every group needs the same number (>= 2) of completions, got sizes {sorted(sizes)}")
    size = sizes.pop()
    for g in groups:
        if not g.prompt_token_ids:
            raise BatchError(f"group {g.group_id} has no prompt_token_ids: the learner cannot recompute "
                             "logprobs without the exact prompt tokens")
        for t in g.trajectories:
            if len(t.token_ids) != len(t.logprobs):
                raise BatchError(f"group {g.group_id} completion {t.index}: {len(t.token_ids)} tokens but "
                                 f"{len(t.logprobs)} behaviour logprobs")
    rewards = torch.tensor([t.reward for g in groups for t in g.trajectories], dtype=torch.float64)
    adv = _advantages(groups, rewards, size, grpo, reward)
    samples: list[Sample] = []
    truncated = 0
    for i, (g, t) in enumerate((g, t) for g in groups for t in g.trajectories):
        truncated += t.truncated
        if adv.keep[i] and not t.truncated and t.token_ids:
            samples.append(Sample(list(g.prompt_token_ids), list(t.token_ids), list(t.logprobs),
                                  float(adv.advantages[i])))
    return TrainBatch(samples=samples, global_tokens=sum(len(s.completion_ids) for s in samples),
                      groups=len(groups), completions=len(rewards), dropped_groups=adv.dropped_groups,
                      speed_groups=adv.speed_groups,
                      truncated=truncated, staleness=[learner_version - g.policy_version for g in groups],
                      rewards=rewards.tolist())


def _advantages(groups: list[Group], rewards: torch.Tensor, size: int, grpo: GrpoConfig,
                reward: RewardConfig) -> GroupAdvantages:
    if grpo.advantages == "reward":
        return group_advantages(rewards, size, grpo.std_scaling)
    parts = [split_training_reward(t.reward, t.measurement, reward) for g in groups for t in g.trajectories]
    gate = torch.tensor([p[0] for p in parts], dtype=torch.float64)             # [B]
    speed = torch.tensor([p[1] or 0.0 for p in parts], dtype=torch.float64)     # [B]
    correct = torch.tensor([p[1] is not None for p in parts])                   # [B] bool
    return decoupled_advantages(gate, speed, correct, size, grpo.std_scaling, speed_weights(groups, grpo))


def speed_weights(groups: list[Group], grpo: GrpoConfig) -> torch.Tensor:
    """[groups] the speed part's weight of each group: `grpo.weak_task_speed_weight` for a group made
    while its task was weak (rl_kernels/task_sampler.py), so that a task losing its correct kernels has
    them pushed by correctness alone, none of them pushed down for being slower; else `grpo.speed_weight`."""
    return torch.tensor([grpo.weak_task_speed_weight if g.made_weak else grpo.speed_weight for g in groups],
                        dtype=torch.float64)


@dataclass(frozen=True)
class MicroBatch:
    input_ids: torch.Tensor            # [b, L] long, right-padded
    attention_mask: torch.Tensor       # [b, L] long
    positions: torch.Tensor            # [b, T] long: the logit position predicting each completion token
    targets: torch.Tensor              # [b, T] long: the completion tokens (0 where padded)
    behaviour_logprobs: torch.Tensor   # [b, T] float32
    mask: torch.Tensor                 # [b, T] float32: 1 on completion tokens
    advantages: torch.Tensor           # [b] float32

    def to(self, device: torch.device) -> MicroBatch:
        return MicroBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def micro_batches(samples: list[Sample], size: int, pad_id: int) -> list[MicroBatch]:
    """`size` sequences per micro-batch, longest first, so rows of similar length share padding."""
    if size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {size}")
    ordered = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids), reverse=True)
    return [_pad(ordered[k:k + size], pad_id) for k in range(0, len(ordered), size)]


def _pad(rows: list[Sample], pad_id: int) -> MicroBatch:
    b = len(rows)
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    t_max = max(len(r.completion_ids) for r in rows)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    positions = torch.zeros((b, t_max), dtype=torch.long)
    targets = torch.zeros((b, t_max), dtype=torch.long)
    behaviour = torch.zeros((b, t_max), dtype=torch.float32)
    mask = torch.zeros((b, t_max), dtype=torch.float32)
    for i, r in enumerate(rows):
        p, t = len(r.prompt_ids), len(r.completion_ids)
        input_ids[i, :p + t] = torch.tensor(r.prompt_ids + r.completion_ids, dtype=torch.long)
        attention[i, :p + t] = 1
        positions[i, :t] = torch.arange(p - 1, p - 1 + t)
        targets[i, :t] = torch.tensor(r.completion_ids, dtype=torch.long)
        behaviour[i, :t] = torch.tensor(r.behaviour_logprobs, dtype=torch.float32)
        mask[i, :t] = 1.0
    advantages = torch.tensor([r.advantage for r in rows], dtype=torch.float32)
    return MicroBatch(input_ids, attention, positions, targets, behaviour, mask, advantages)
