"""The GRPO objective (DESIGN.md, "Learning"): advantages per group (from the scalar reward, or with
correctness and speed normalised apart), and the clipped, importance-weighted token loss.

Shapes: B completions (several groups of G), T tokens (completion tokens only, right-padded).
The loss is a sum over tokens divided by the *global* token count of the optimisation step, passed
in by the caller, so that splitting a batch into micro-batches or data-parallel shards gives the
same gradient as one pass over the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_kernels.config import GrpoConfig, StdScaling


@dataclass(frozen=True)
class GroupAdvantages:
    advantages: torch.Tensor   # [B] per completion; 0 for completions of dropped groups
    keep: torch.Tensor         # [B] bool: False for completions of groups without any signal
    dropped_groups: int
    speed_groups: int = 0      # groups with a speed signal (decoupled advantages; 0 otherwise)


def _centred(r: torch.Tensor, member: torch.Tensor, std_scaling: StdScaling, eps: float
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's value minus the mean of its group's members, optionally divided by a std.

    r, member [groups, G]; returns (advantages [groups, G], 0 for non-members and for groups whose
    members all share one value; has_signal [groups]).
    """
    n = member.sum(dim=1, keepdim=True)                                          # [groups, 1]
    mean = (r * member).sum(dim=1, keepdim=True) / n.clamp(min=1)                # [groups, 1]
    centred = (r - mean) * member                                                # [groups, G]
    top = torch.where(member, r, torch.full_like(r, -torch.inf)).max(dim=1).values   # [groups]
    low = torch.where(member, r, torch.full_like(r, torch.inf)).min(dim=1).values    # [groups]
    has_signal = (n.squeeze(1) >= 2) & (top - low > eps)                          # [groups]
    if std_scaling == "group":
        std = (centred.pow(2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()   # [groups, 1]
        centred = centred / (std + eps)
    elif std_scaling == "batch":
        counted = member & has_signal[:, None]                                   # [groups, G]
        centred = centred / (r[counted].std() + eps if counted.sum() > 1 else 1.0)
    elif std_scaling != "none":
        raise ValueError(f"std_scaling must be none, group or batch, got {std_scaling!r}")
    return torch.where(has_signal[:, None], centred, torch.zeros_like(centred)), has_signal


def group_advantages(rewards: torch.Tensor, group_size: int, std_scaling: StdScaling = "none",
                     eps: float = 1e-6) -> GroupAdvantages:
    """advantage = reward - group mean, optionally divided by the group's or the batch's std.

    Groups whose rewards are all equal carry no learning signal (every advantage is 0) and only
    dilute the token mean, so they are dropped and counted.
    """
    r = _grouped(rewards, group_size)                                            # [groups, G]
    adv, keep_group = _centred(r, torch.ones_like(r, dtype=torch.bool), std_scaling, eps)
    keep = keep_group[:, None].expand_as(r).reshape(-1)                          # [B]
    return GroupAdvantages(adv.reshape(-1).to(rewards.dtype), keep, int((~keep_group).sum()))


def decoupled_advantages(gate: torch.Tensor, speed: torch.Tensor, fast_enough: torch.Tensor, group_size: int,
                         std_scaling: StdScaling = "none", speed_weight: float | torch.Tensor = 1.0,
                         eps: float = 1e-6) -> GroupAdvantages:
    """Correctness and speed get advantages of their own, summed: A = A_gate + speed_weight * A_speed.

    With one scalar reward, a group holding a failure spends its whole spread on the correctness
    gap (a correct kernel's base against a failure's ~0), and the spread in speed among its correct
    kernels (ln 1.2 = 0.18) barely moves the advantages: a policy learns to be correct, not fast.
    Normalising each part apart (GDPO's decoupling) gives the faster of two correct kernels the
    same weight of signal as the correct one of a correct/incorrect pair.

    gate         [B] the reward without its speed term (failure / shaping rewards, or the correct base)
    speed        [B] the speed term of kernels that earned the correct reward (ignored elsewhere)
    fast_enough  [B] bool: the completions whose `speed` counts (the group's correct kernels)
    speed_weight one number, or [groups] one per group (a weak task's groups weigh speed apart)
    A_gate is group_advantages(gate); A_speed is speed minus the mean over the group's correct
    kernels, scaled the same way, and 0 for the others and for groups with fewer than two correct
    kernels of different speed or a speed weight of 0. A group is dropped when neither part has a signal.
    """
    g = _grouped(gate, group_size)                                               # [groups, G]
    s = _grouped(speed, group_size)                                              # [groups, G]
    weight = torch.as_tensor(speed_weight, dtype=torch.float64).expand(g.size(0))  # [groups]
    member = fast_enough.view(-1, group_size).bool() & (weight > 0)[:, None]     # [groups, G]
    adv_gate, gate_signal = _centred(g, torch.ones_like(member), std_scaling, eps)
    adv_speed, speed_signal = _centred(s, member, std_scaling, eps)
    keep_group = gate_signal | speed_signal                                      # [groups]
    adv = adv_gate + weight[:, None] * adv_speed                                 # [groups, G]
    keep = keep_group[:, None].expand_as(g).reshape(-1)                          # [B]
    return GroupAdvantages(adv.reshape(-1).to(gate.dtype), keep, int((~keep_group).sum()),
                           int(speed_signal.sum()))


def _grouped(values: torch.Tensor, group_size: int) -> torch.Tensor:
    if values.dim() != 1 or values.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, "
                         f"got shape {tuple(values.shape)}")
    return values.double().view(-1, group_size)                                   # [groups, G]


@dataclass(frozen=True)
class LossTerms:
    loss: torch.Tensor              # scalar, to backpropagate
    policy_loss: float
    kl: float                       # to the reference model; 0 when it is off
    clip_fraction: float            # of counted tokens whose ratio was clipped
    is_weight_mean: float           # mean sequence-level importance weight (kept sequences)
    is_masked_sequences: int        # sequences dropped because their weight left [1/cap, cap]
    mismatch_kl: float              # learner vs behaviour logprobs (k3 estimator), per token


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor,
              advantages: torch.Tensor, mask: torch.Tensor, global_tokens: int,
              cfg: GrpoConfig = GrpoConfig(), ref_logprobs: torch.Tensor | None = None) -> LossTerms:
    """Token-mean clipped policy-gradient loss with sequence-level masked importance weights.

    logprobs            [B, T] current policy (with grad)
    old_logprobs        [B, T] the learner's own recomputation before this update (no grad): the
                        proximal policy the ratio is clipped around
    behaviour_logprobs  [B, T] what the generator reported when it sampled (possibly an older
                        policy version, another engine): corrected by a per-sequence weight
                        exp(mean_t(old - behaviour)), and sequences whose weight leaves
                        [1/cfg.is_cap, cfg.is_cap] are masked out, not clipped
    advantages          [B]
    mask                [B, T] 1 for completion tokens that count (0 for padding and for
                        truncated completions, which the caller masks entirely)
    global_tokens       the number of counted tokens in the whole optimisation step
    ref_logprobs        [B, T] the base model's logprobs; the KL term (k3) needs them and cfg.kl_coef > 0
    """
    clip_low, clip_high, is_cap, kl_coef = cfg.clip_low, cfg.clip_high, cfg.is_cap, cfg.kl_coef
    if global_tokens <= 0:
        raise ValueError("global_tokens must be positive")
    mask = mask.to(logprobs.dtype)
    n_tok = mask.sum(dim=1)                                                     # [B]
    has_tokens = n_tok > 0                                                      # [B]
    seq_log_w = ((old_logprobs - behaviour_logprobs) * mask).sum(dim=1) / n_tok.clamp(min=1)  # [B]
    seq_w = torch.exp(seq_log_w).detach()                                       # [B]
    in_range = (seq_w <= is_cap) & (seq_w >= 1.0 / is_cap) & has_tokens
    token_mask = mask * in_range[:, None].to(mask.dtype)                         # [B, T]

    ratio = torch.exp(logprobs - old_logprobs.detach())                         # [B, T]
    adv = advantages[:, None].to(logprobs.dtype)                                # [B, 1]
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped) * seq_w[:, None]              # [B, T]
    policy_loss = (per_token * token_mask).sum() / global_tokens

    kl = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    if ref_logprobs is not None and kl_coef > 0:
        d = ref_logprobs.detach() - logprobs                                    # [B, T]
        kl = ((torch.exp(d) - d - 1) * token_mask).sum() / global_tokens
    loss = policy_loss + kl_coef * kl

    with torch.no_grad():
        counted = token_mask.sum().clamp(min=1)
        was_clipped = ((ratio < 1.0 - clip_low) & (adv < 0)) | ((ratio > 1.0 + clip_high) & (adv > 0))
        clip_fraction = (was_clipped.to(mask.dtype) * token_mask).sum() / counted
        d_b = behaviour_logprobs - old_logprobs
        mismatch = ((torch.exp(d_b) - d_b - 1) * mask).sum() / n_tok.sum().clamp(min=1)
        w_mean = seq_w[in_range].mean() if in_range.any() else torch.zeros(())
    return LossTerms(loss, float(policy_loss.detach()), float(kl.detach()), float(clip_fraction), float(w_mean),
                     int((~in_range & has_tokens).sum()), float(mismatch))
