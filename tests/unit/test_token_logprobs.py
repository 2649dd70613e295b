"""The learner's completion-token logprobs, computed a chunk of tokens at a time (learner/engine.py),
against the plain computation over every position's full-vocabulary logits: the same values, the
same entropies and the same gradients, for a LoRA adapter and for a full fine-tune of a model whose output head shares the
embedding's weight (as SmolLM2's does), under ZeRO stages 0 and 2 (ZeRO-2 reduces a weight's
gradient once per step, so every chunk's share must reach it in one backward pass), with prompts
and completions of different lengths in one micro-batch (so padding and the gather are exercised).
The chunked form exists only to bound memory; anything it changed would change what GRPO and the
warm start train on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_model import save_tiny_llama
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rl_kernels.config import LearnerConfig
from rl_kernels.learner.batch import MicroBatch, Sample, micro_batches
from rl_kernels.learner.engine import (PolicyEngine, build_policy_engine, grad_norm_then_step, init_distributed,
                                      token_logprobs)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with its output head tied to the embedding."""
    untied = save_tiny_llama(tmp_path_factory.mktemp("tiny"))
    config = LlamaConfig.from_pretrained(untied)
    config.tie_word_embeddings = True
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    out = untied.parent / "tied"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(untied).save_pretrained(out)
    return out


def full_logit_logprobs(pe: PolicyEngine, mb: MicroBatch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Every position's logits at once, then softmax and gather: what the chunks must reproduce."""
    logits = pe.engine(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits  # [b, L, V]
    picked = logits.gather(1, mb.positions[:, :, None].expand(-1, -1, logits.size(-1)))                 # [b, T, V]
    logp = torch.log_softmax(picked.float() / temperature, dim=-1)
    return logp.gather(-1, mb.targets[:, :, None])[..., 0] * mb.mask, -(logp.exp() * logp).sum(-1) * mb.mask


def batch(pad_id: int) -> MicroBatch:
    gen = torch.Generator().manual_seed(0)
    shapes = [(9, 13), (4, 7), (11, 2)]          # (prompt, completion) lengths: rows end at different places
    samples = [Sample(torch.randint(4, 20, (p,), generator=gen).tolist(), torch.randint(4, 20, (t,), generator=gen).tolist(),
                      [0.0] * t, 1.0) for p, t in shapes]
    return micro_batches(samples, 3, pad_id)[0]


def engine(model_dir: Path, full: bool, zero_stage: int) -> PolicyEngine:
    """A fresh engine; the same weights every call (a LoRA adapter's B moved off 0, so the adapter's
    path carries gradient too)."""
    cfg = LearnerConfig(zero_stage=zero_stage, lr=1e-2, lora={"rank": 4, "alpha": 8, "dropout": 0.0})
    pe = build_policy_engine(str(model_dir), cfg, lambda s: 1.0, full=full)
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(1)
        for name, p in pe.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1)
    return pe


def backward(pe: PolicyEngine, logp: torch.Tensor, mb: MicroBatch) -> None:
    """The engine's backward of a loss that weighs tokens apart."""
    weights = torch.linspace(-1.0, 2.0, mb.mask.numel()).view_as(mb.mask)
    pe.engine.backward((logp * weights * mb.mask).sum(), scale_wrt_gas=False)


def trained(pe: PolicyEngine) -> list[torch.Tensor]:
    return [p.detach().clone() for p in pe.model.parameters() if p.requires_grad]


@pytest.mark.parametrize("zero_stage", [0, 2])
@pytest.mark.parametrize("full", [False, True], ids=["lora", "full_finetune"])
def test_chunks_give_the_full_logits_values_and_gradients(model_dir: Path, full: bool, zero_stage: int) -> None:
    init_distributed("cpu")
    ref = engine(model_dir, full, zero_stage)
    mb = batch(ref.pad_id)
    assert mb.mask.sum() == 22 and mb.mask[1, 2:].sum() == 0   # rows longest first: (11, 2) is second
    ref_logp, ref_entropy = full_logit_logprobs(ref, mb, 0.7)
    backward(ref, ref_logp, mb)
    ref_grads = [p.grad.clone() for p in ref.model.parameters() if p.requires_grad] if zero_stage == 0 else None
    ref_norm = grad_norm_then_step(ref)
    for rows in (1, 5, 22, 256):   # chunks of one token, chunks that split rows, one chunk, the default
        pe = engine(model_dir, full, zero_stage)
        logp, entropy = token_logprobs(pe, mb, 0.7, rows_per_chunk=rows)
        assert logp.shape == entropy.shape == mb.mask.shape
        torch.testing.assert_close(logp, ref_logp, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(entropy, ref_entropy, rtol=1e-5, atol=1e-6)
        assert bool((logp[mb.mask == 0] == 0).all()) and bool((entropy[mb.mask == 0] == 0).all())
        backward(pe, logp, mb)
        if ref_grads is not None:   # ZeRO-2 keeps gradients in its own buffers until the step
            grads = [p.grad for p in pe.model.parameters() if p.requires_grad]
            for got, want in zip(grads, ref_grads, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)   # fp32 sums in another order
        assert grad_norm_then_step(pe) == pytest.approx(ref_norm, rel=1e-5)
        for got, want in zip(trained(pe), trained(ref), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():   # the held-out loss and the ratio's reference pass run without autograd
        pe = engine(model_dir, full, zero_stage)
        torch.testing.assert_close(token_logprobs(pe, mb, 0.7)[0], ref_logp.detach(), rtol=1e-5, atol=1e-6)
