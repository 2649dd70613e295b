"""The supervised warm start: token cross-entropy on verified answers, on the same engine as GRPO.

A verified kernel becomes (prompt tokens, answer tokens) exactly as the generator would see and
produce them: the prompt through the tokenizer's chat template with the generation prompt added
(the policy's own encoding), the answer followed by the end-of-sequence token so the model learns
to stop.  Only answer tokens carry loss, normalised by the step's answer-token count.  The adapter
it saves is what `rl-kernels train` starts from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rl_kernels.learner.batch import Sample, micro_batches
from rl_kernels.learner.checkpoints import load_checkpoint, save_checkpoint
from rl_kernels.learner.engine import (build_policy_engine, grad_norm_then_step, init_distributed, lr_factor,
                                      save_adapter_with_probe, save_trained, token_logprobs)
from rl_kernels.config import LearnerConfig
from rl_kernels.sft.examples import SftExample


@dataclass(frozen=True)
class EncodedExample:
    prompt_ids: list[int]
    answer_ids: list[int]   # the answer, then EOS; cut to the token budget


def encode_example(tokenizer: Any, ex: SftExample, max_answer_tokens: int) -> EncodedExample:
    """Tokens of one example; the prompt is encoded as the hf policy encodes it for generation."""
    text = tokenizer.apply_chat_template(ex.messages, add_generation_prompt=True, tokenize=False)
    prompt = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    answer = list(tokenizer(ex.answer, add_special_tokens=False)["input_ids"])
    if tokenizer.eos_token_id is not None:
        answer.append(int(tokenizer.eos_token_id))
    return EncodedExample(prompt, answer[:max_answer_tokens])


class SftTrainer:
    """Owns the model, the LoRA adapter and the DeepSpeed engine of one warm-start process."""

    def __init__(self, model: str, cfg: LearnerConfig, *, total_steps: int | None = None,
                 init_adapter: Path | None = None, lr: float | None = None, full: bool = False,
                 probe_magnify_to: float = 0.0) -> None:
        """`lr` replaces cfg.lr (supervised stages set their own; unset, GRPO's learner.lr); `full`
        trains every weight instead of a LoRA adapter (save with `save_model`); `probe_magnify_to` is
        policy.delivery_magnify_to, for the probe published with each adapter."""
        cfg = cfg if lr is None else cfg.model_copy(update={"lr": lr})
        init_distributed(cfg.device)
        self.cfg = cfg
        self.full = full
        self.device = torch.device(cfg.device)
        self.pe = build_policy_engine(model, cfg, lambda s: lr_factor(s, cfg, total_steps), init_adapter, full)
        self.model_name = model
        self.probe_magnify_to = probe_magnify_to

    def _samples(self, batch: list[EncodedExample]) -> list[Sample]:
        return [Sample(e.prompt_ids, e.answer_ids, [0.0] * len(e.answer_ids), 1.0) for e in batch if e.answer_ids]

    def train_step(self, batch: list[EncodedExample]) -> dict[str, float]:
        """One optimizer step on `batch`: the mean answer-token negative log-likelihood."""
        t0 = time.monotonic()
        samples = self._samples(batch)
        tokens = sum(len(s.completion_ids) for s in samples)
        if not tokens:
            raise ValueError("an SFT step needs at least one answer token")
        self.pe.engine.train()
        loss_sum = 0.0
        for mb in micro_batches(samples, self.cfg.micro_batch_size, self.pe.pad_id):
            mb = mb.to(self.device)
            logp, _ = token_logprobs(self.pe, mb, 1.0)                 # [b, T]
            loss = -(logp * mb.mask).sum() / tokens                     # scalar, over the step's tokens
            self.pe.engine.backward(loss, scale_wrt_gas=False)
            loss_sum += float(loss.detach())
        grad_norm = grad_norm_then_step(self.pe)
        return {"sft/loss": loss_sum, "sft/tokens": float(tokens), "sft/grad_norm": grad_norm,
                "sft/lr": float(self.pe.scheduler.get_last_lr()[0]), "sft/step_s": time.monotonic() - t0}

    @torch.no_grad()
    def token_loss(self, batch: list[EncodedExample]) -> float:
        """Mean answer-token negative log-likelihood without training (held-out loss)."""
        samples = self._samples(batch)
        tokens = sum(len(s.completion_ids) for s in samples)
        if not tokens:
            raise ValueError("a held-out loss needs at least one answer token")
        self.pe.engine.eval()
        total = 0.0
        for mb in micro_batches(samples, self.cfg.micro_batch_size, self.pe.pad_id):
            mb = mb.to(self.device)
            logp, _ = token_logprobs(self.pe, mb, 1.0)
            total -= float((logp * mb.mask).sum())
        return total / tokens

    def save_checkpoint(self, directory: Path, step: int, client_state: dict[str, Any]) -> Path:
        """The adapter's training state (weights, optimizer, schedule, RNGs) under `step-{step}`."""
        return save_checkpoint(self.pe, directory, step, client_state)

    def load_checkpoint(self, directory: Path, step: int) -> dict[str, Any]:
        """Restore `step-{step}`; returns its client state."""
        return load_checkpoint(self.pe, directory, step)

    def save_adapter(self, directory: Path) -> None:
        if self.full:
            raise ValueError("a fully fine-tuned model has no adapter: save it with save_model")
        save_adapter_with_probe(self.pe, directory, self.model_name, self.probe_magnify_to)

    def save_model(self, directory: Path, tokenizer: Any) -> None:
        """The fully fine-tuned weights with the tokenizer: a model directory `policy.model` loads."""
        if not self.full:
            raise ValueError("a LoRA warm start saves an adapter (save_adapter), not a model")
        save_trained(self.pe, directory)
        tokenizer.save_pretrained(str(directory))
