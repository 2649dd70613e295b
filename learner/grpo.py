"""The GRPO objective (DESIGN.md, "Learning"), in two readable functions: advantages per group, and
the clipped, importance-weighted token loss.

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
    keep: torch.Tensor         # [B] bool: False for completions of zero-variance groups
    dropped_groups: int


def group_advantages(rewards: torch.Tensor, group_size: int, std_scaling: StdScaling = "none",
                     eps: float = 1e-6) -> GroupAdvantages:
    """advantage = reward - group mean, optionally divided by the group's or the batch's std.

    Groups whose rewards are all equal carry no learning signal (every advantage is 0) and only
    dilute the token mean, so they are dropped and counted.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, "
                         f"got shape {tuple(rewards.shape)}")
    r = rewards.double().view(-1, group_size)                       # [groups, G]
    centred = r - r.mean(dim=1, keepdim=True)                       # [groups, G]
    spread = r.max(dim=1).values - r.min(dim=1).values               # [groups]
    keep_group = spread > eps                                        # [groups]
    if std_scaling == "group":
        centred = centred / (r.std(dim=1, keepdim=True) + eps)
    elif std_scaling == "batch":
        centred = centred / (r[keep_group].std() + eps if keep_group.any() else 1.0)
    elif std_scaling != "none":
        raise ValueError(f"std_scaling must be none, group or batch, got {std_scaling!r}")
    keep = keep_group[:, None].expand_as(r).reshape(-1)               # [B]
    adv = torch.where(keep, centred.reshape(-1), torch.zeros_like(centred.reshape(-1)))
    return GroupAdvantages(adv.to(rewards.dtype), keep, int((~keep_group).sum()))


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
