"""The GRPO trainer: LoRA (PEFT) on a transformers causal LM, optimised through a DeepSpeed engine.

One `train_step` = one batch of scored groups -> `epochs_per_batch` optimizer steps. The learner
recomputes every completion's logprobs itself: the ratio is clipped around its own pre-update
logprobs (epoch 0's forward, detached), and the generator's behaviour logprobs only enter the
sequence-level importance weight and the train/inference mismatch KL (learner/grpo.py).

Gradient accumulation is the caller's (DeepSpeed's `managed_gradient_accumulation: false`):
the number of micro-batches changes with every batch (dropped groups, truncated completions),
and the loss is already normalised by the step's global token count, so `backward` must not
rescale it and `step()` is the only accumulation boundary.

The model, adapter and DeepSpeed engine are built in learner/engine.py, shared with the
supervised warm start (learner/sft.py).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from rl_kernels.learner.batch import MicroBatch, TrainBatch, assemble_batch, micro_batches
from rl_kernels.learner.checkpoints import load_checkpoint, save_checkpoint
from rl_kernels.learner.engine import (build_policy_engine, grad_norm_then_step, init_distributed, lr_factor,
                                      save_adapter_with_probe, token_logprobs)
from rl_kernels.learner.grpo import grpo_loss
from rl_kernels.config import GrpoConfig, LearnerConfig, RewardConfig
from rl_kernels.host_share import HostShare, SharedUse
from rl_kernels.trajectories import Group

log = logging.getLogger(__name__)


class GrpoTrainer:
    """Owns the model, the LoRA adapter and the DeepSpeed engine of one learner process."""

    def __init__(self, model: str, cfg: LearnerConfig, grpo: GrpoConfig, *, temperature: float,
                 total_steps: int | None = None, init_adapter: Path | None = None,
                 host: HostShare | None = None, reward: RewardConfig = RewardConfig(),
                 probe_magnify_to: float = 0.0) -> None:
        """`probe_magnify_to`: policy.delivery_magnify_to, for the probe published with each adapter."""
        init_distributed(cfg.device)
        self.cfg, self.grpo, self.temperature = cfg, grpo, temperature
        self.reward = reward   # where a correct kernel's reward splits into base and speed
        self.host = host   # with a host share, training yields to timers between micro-batches
        self.device = torch.device(cfg.device)
        self.on_gpu = self.device.type == "cuda"
        self.pe = build_policy_engine(model, cfg, lambda s: lr_factor(s, cfg, total_steps), init_adapter)
        self.model, self.engine, self.scheduler = self.pe.model, self.pe.engine, self.pe.scheduler
        self.pad_id, self.trainable_params = self.pe.pad_id, self.pe.trainable_params
        self.model_name = model
        self.probe_magnify_to = probe_magnify_to

    # ---- one step -------------------------------------------------------------------------------
    def train_step(self, groups: list[Group], version: int) -> dict[str, float]:
        """Train on `groups` (sampled with versions <= `version`, the learner's current one).
        Returns the step's loss terms and counts, keyed as in DESIGN.md "Monitoring"."""
        t0 = time.monotonic()
        batch = assemble_batch(groups, version, self.grpo, self.reward)
        mbs = [mb.to(self.device) for mb in micro_batches(batch.samples, self.cfg.micro_batch_size, self.pad_id)]
        self.engine.train()
        old: list[torch.Tensor] = []
        sums = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_tokens": 0.0, "entropy_tokens": 0.0,
                "mismatch_tokens": 0.0, "is_weight": 0.0, "is_masked": 0, "grad_norm": 0.0}
        counted = max(batch.global_tokens, 1)
        # Nothing to learn from (every group zero-variance, every completion truncated): no
        # optimizer step, or Adam's momentum would keep moving the weights on zero gradients.
        epochs = self.cfg.epochs_per_batch if batch.global_tokens else 0
        with SharedUse(self.host) as use:
            for epoch in range(epochs):
                for k, mb in enumerate(mbs):
                    use.between()   # a waiting timer measures before this micro-batch
                    logprobs, entropy = self._logprobs(mb)
                    if epoch == 0:
                        old.append(logprobs.detach())
                    ref = self._reference_logprobs(mb) if self.grpo.kl_coef > 0 else None
                    terms = grpo_loss(logprobs, old[k], mb.behaviour_logprobs, mb.advantages, mb.mask,
                                      counted, self.grpo, ref_logprobs=ref)
                    self.engine.backward(terms.loss, scale_wrt_gas=False)
                    if epoch == epochs - 1:
                        tokens = float(mb.mask.sum())
                        sums["loss"] += float(terms.loss.detach())
                        sums["policy_loss"] += terms.policy_loss
                        sums["kl"] += terms.kl
                        sums["clip_tokens"] += terms.clip_fraction * tokens
                        sums["entropy_tokens"] += float((entropy.detach() * mb.mask).sum())
                        sums["mismatch_tokens"] += terms.mismatch_kl * tokens
                        sums["is_weight"] += terms.is_weight_mean * mb.mask.size(0)
                        sums["is_masked"] += terms.is_masked_sequences
                sums["grad_norm"] = grad_norm_then_step(self.pe)
        elapsed = time.monotonic() - t0
        return self._stats(batch, sums, elapsed)

    def _logprobs(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return token_logprobs(self.pe, mb, self.temperature)

    @torch.no_grad()
    def _reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """The base model's logprobs: the same weights with the adapter switched off, so a KL
        term costs one forward and no second model."""
        with self.model.disable_adapter():
            return self._logprobs(mb)[0]

    @property
    def optimizer_steps(self) -> int:
        return self.pe.optimizer_steps

    def _stats(self, batch: TrainBatch, sums: dict[str, float], elapsed: float) -> dict[str, float]:
        tokens = batch.global_tokens
        n = len(batch.samples)
        stale = batch.staleness
        return {
            "learner/loss": sums["loss"], "learner/policy_loss": sums["policy_loss"], "learner/kl": sums["kl"],
            "learner/clip_fraction": sums["clip_tokens"] / tokens if tokens else 0.0,
            "learner/entropy": sums["entropy_tokens"] / tokens if tokens else 0.0,
            "learner/mismatch_kl": sums["mismatch_tokens"] / tokens if tokens else 0.0,
            "learner/is_weight_mean": sums["is_weight"] / n if n else 0.0,
            "learner/is_masked_sequences": sums["is_masked"],
            "learner/grad_norm": sums["grad_norm"], "learner/lr": float(self.scheduler.get_last_lr()[0]),
            "learner/tokens": tokens, "learner/sequences": n, "learner/groups": batch.groups,
            "learner/dropped_groups": batch.dropped_groups,
            "learner/dropped_group_fraction": batch.dropped_groups / batch.groups,
            "learner/speed_groups": batch.speed_groups,
            "learner/truncated": batch.truncated,
            "learner/reward_mean": sum(batch.rewards) / len(batch.rewards),
            "learner/staleness_mean": sum(stale) / len(stale), "learner/staleness_max": max(stale),
            "learner/step_s": elapsed, "learner/skipped": float(tokens == 0),
            "learner/tokens_per_s": tokens * self.cfg.epochs_per_batch / elapsed if elapsed > 0 else 0.0,
        }

    # ---- adapters and checkpoints ---------------------------------------------------------------
    def save_adapter(self, directory: Path) -> None:
        """The adapter, and the probe generators check it against before sampling from it."""
        save_adapter_with_probe(self.pe, directory, self.model_name, self.probe_magnify_to)

    def save_checkpoint(self, directory: Path, step: int, client_state: dict[str, Any]) -> Path:
        """DeepSpeed engine state plus `client_state` and the RNGs, under tag `step-{step}`."""
        return save_checkpoint(self.pe, directory, step, client_state)

    def load_checkpoint(self, directory: Path, step: int) -> dict[str, Any]:
        """Restore `step-{step}`; returns its client state (with the RNGs already restored)."""
        return load_checkpoint(self.pe, directory, step)
