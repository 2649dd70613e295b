"""Each term of the GRPO objective against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rl_kernels.learner.grpo import decoupled_advantages, group_advantages, grpo_loss
from rl_kernels.config import GrpoConfig


def test_advantages_centre_per_group_and_drop_zero_variance() -> None:
    out = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0]), group_size=4)
    assert out.advantages.tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    assert out.keep.tolist() == [True] * 4 + [False] * 4
    assert out.dropped_groups == 1


@pytest.mark.parametrize("scaling", ["group", "batch"])
def test_std_scaling(scaling: str) -> None:
    # std (unbiased) of [1, 0, 0, 1] is sqrt(1/3); the dropped group does not enter the batch std.
    out = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0]), 4, scaling)
    a = 0.5 * math.sqrt(3)
    assert out.advantages[:4].tolist() == pytest.approx([a, -a, -a, a], rel=1e-5)


def test_advantages_reject_bad_shapes() -> None:
    with pytest.raises(ValueError, match="group_size=4"):
        group_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="std_scaling"):
        group_advantages(torch.tensor([0.0, 1.0]), 2, "rank")   # type: ignore[arg-type]


def test_decoupled_advantages_give_speed_its_own_signal() -> None:
    # group 1: three correct kernels (base 3, speed terms +0.2, 0.0, -0.2) and a failure (0.03);
    # group 2: one correct kernel only (no speed signal) and failures; group 3: all correct, same speed.
    gate = torch.tensor([3.0, 3.0, 3.0, 0.03, 3.0, 0.0, 0.03, 0.0, 3.0, 3.0, 3.0, 3.0])
    speed = torch.tensor([0.2, 0.0, -0.2, 0.0, 0.5, 0.0, 0.0, 0.0, 0.1, 0.1, 0.1, 0.1])
    correct = torch.tensor([1, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1], dtype=torch.bool)
    out = decoupled_advantages(gate, speed, correct, group_size=4)
    g1 = out.advantages[:4].tolist()
    gate_mean = (9.0 + 0.03) / 4
    assert g1 == pytest.approx([3.0 - gate_mean + 0.2, 3.0 - gate_mean, 3.0 - gate_mean - 0.2, 0.03 - gate_mean])
    g2 = out.advantages[4:8].tolist()   # correctness only: the lone correct kernel's speed is no signal
    assert g2 == pytest.approx([3.0 - 3.03 / 4, -3.03 / 4, 0.03 - 3.03 / 4, -3.03 / 4])
    assert out.advantages[8:].tolist() == [0.0] * 4
    assert out.keep.tolist() == [True] * 8 + [False] * 4
    assert (out.dropped_groups, out.speed_groups) == (1, 1)


def test_decoupled_speed_alone_keeps_an_all_correct_group_and_scales_apart() -> None:
    # every kernel correct: the gate is flat, the speed spread is the whole signal, and with group
    # scaling it reaches the same size as a correct/incorrect gap would.
    gate = torch.tensor([3.0, 3.0, 3.0, 3.0])
    speed = torch.tensor([0.1, 0.0, 0.0, 0.1])
    out = decoupled_advantages(gate, speed, torch.ones(4, dtype=torch.bool), 4, "group")
    a = 0.5 * math.sqrt(3)
    assert out.advantages.tolist() == pytest.approx([a, -a, -a, a], rel=1e-4)   # eps beside a std of 0.06
    assert out.keep.all() and out.speed_groups == 1
    weighted = decoupled_advantages(gate, speed, torch.ones(4, dtype=torch.bool), 4, "group", speed_weight=0.5)
    assert weighted.advantages.tolist() == pytest.approx([a / 2, -a / 2, -a / 2, a / 2], rel=1e-4)


def test_decoupled_with_one_part_flat_equals_plain_group_advantages() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.0, 2.0, 0.0])
    plain = group_advantages(rewards, 4, "group")
    none_correct = decoupled_advantages(rewards, torch.zeros(8), torch.zeros(8, dtype=torch.bool), 4, "group")
    assert none_correct.advantages.tolist() == pytest.approx(plain.advantages.tolist())
    assert none_correct.speed_groups == 0


def _zeros(b: int = 2, t: int = 2) -> torch.Tensor:
    return torch.zeros(b, t, dtype=torch.float64)


def test_on_policy_loss_is_minus_token_mean_advantage() -> None:
    logp = _zeros().requires_grad_()
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    terms = grpo_loss(logp, _zeros(), _zeros(), torch.tensor([1.0, -1.0]), mask, global_tokens=3)
    assert terms.loss.item() == pytest.approx(-1 / 3)          # (-1 - 1 + 1) / 3
    terms.loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-1 / 3, -1 / 3, 1 / 3, 0.0])
    assert terms.clip_fraction == 0 and terms.is_weight_mean == 1 and terms.mismatch_kl == 0


def test_clipping_low_and_high() -> None:
    # token 0: ratio 1.5, A=+1 -> clipped at 1.28 (no grad); token 1: ratio 0.5, A=+1 -> unclipped.
    # row 1: ratio 0.5, A=-1 -> clipped at 0.8 (no grad); ratio 1.2, A=-1 -> unclipped.
    logp = torch.log(torch.tensor([[1.5, 0.5], [0.5, 1.2]], dtype=torch.float64)).requires_grad_()
    terms = grpo_loss(logp, _zeros(), _zeros(), torch.tensor([1.0, -1.0]), torch.ones(2, 2), global_tokens=4)
    assert terms.loss.item() == pytest.approx((-1.28 - 0.5 + 0.8 + 1.2) / 4)
    assert terms.clip_fraction == pytest.approx(0.5)
    terms.loss.backward()
    # d/dlogp of -ratio*A/4 is -ratio*A/4 where unclipped
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -0.5 / 4, 0.0, 1.2 / 4])


def test_sequence_importance_weight_and_mask() -> None:
    # seq 0: old - behaviour = log 2 on every token -> weight 2; seq 1: log 4 -> 4 > cap 3: masked.
    behaviour = -torch.log(torch.tensor([[2.0, 2.0], [4.0, 4.0]], dtype=torch.float64))
    logp = _zeros().requires_grad_()
    terms = grpo_loss(logp, _zeros(), behaviour, torch.tensor([1.0, 1.0]), torch.ones(2, 2), global_tokens=4)
    assert terms.loss.item() == pytest.approx(2 * (-1 - 1) / 4)
    assert terms.is_masked_sequences == 1 and terms.is_weight_mean == pytest.approx(2.0)
    # k3 of behaviour vs learner: d = behaviour - old; per token exp(d) - d - 1, averaged
    k3 = [math.exp(-math.log(x)) + math.log(x) - 1 for x in (2.0, 4.0)]
    assert terms.mismatch_kl == pytest.approx(sum(k3) / 2)


def test_kl_to_reference_k3() -> None:
    ref = torch.full((1, 2), math.log(2.0), dtype=torch.float64)
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    terms = grpo_loss(logp, torch.zeros(1, 2, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64),
                      torch.tensor([0.0]), torch.ones(1, 2), global_tokens=2, cfg=GrpoConfig(kl_coef=0.5),
                      ref_logprobs=ref)
    per_token = 2.0 - math.log(2.0) - 1
    assert terms.kl == pytest.approx(per_token)
    assert terms.loss.item() == pytest.approx(0.5 * per_token)


def test_sharding_invariance() -> None:
    """Two micro-batches with the global token count give the full batch's gradient."""
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=gen, dtype=torch.float64)
    behaviour = old + 0.05 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    base = old + 0.1 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.3, -0.8])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.float64)
    total = int(mask.sum())
    full = base.clone().requires_grad_()
    grpo_loss(full, old, behaviour, adv, mask, total).loss.backward()
    parts = base.clone().requires_grad_()
    for rows in (slice(0, 1), slice(1, 4)):
        grpo_loss(parts[rows], old[rows], behaviour[rows], adv[rows], mask[rows], total).loss.backward()
    assert torch.allclose(full.grad, parts.grad)


def test_rejects_empty_token_count() -> None:
    with pytest.raises(ValueError, match="global_tokens"):
        grpo_loss(_zeros(), _zeros(), _zeros(), torch.zeros(2), torch.ones(2, 2), global_tokens=0)
