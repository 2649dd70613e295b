"""The GRPO trainer: LoRA (PEFT) on a transformers causal LM, optimised through a DeepSpeed engine.

One `train_step` = one batch of scored groups -> `epochs_per_batch` optimizer steps. The learner
recomputes every completion's logprobs itself: the ratio is clipped around its own pre-update
logprobs (epoch 0's forward, detached), and the generator's behaviour logprobs only enter the
sequence-level importance weight and the train/inference mismatch KL (learner/grpo.py).

Gradient accumulation is the caller's (DeepSpeed's `managed_gradient_accumulation: false`):
the number of micro-batches changes with every batch (dropped groups, truncated completions),
and the loss is already normalised by the step's global token count, so `backward` must not
rescale it and `step()` is the only accumulation boundary.

DeepSpeed picks its accelerator when first imported, from DS_ACCELERATOR; `init_distributed`
sets it from the learner's device first. A single learner process forms a world of one (gloo on
cpu, nccl on cuda); ZeRO stages 0-3 all work there, on CPU too.
"""

from __future__ import annotations

import logging
import math
import os
import random
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import torch

from learner.batch import MicroBatch, TrainBatch, assemble_batch, micro_batches
from learner.grpo import grpo_loss
from rl_kernels.config import GrpoConfig, LearnerConfig
from rl_kernels.policy.factory import torch_dtype
from rl_kernels.policy.models import resolve_model
from rl_kernels.trajectories import Group

log = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "step-"


def init_distributed(device: str) -> None:
    """A one-process torch.distributed world for DeepSpeed (no-op when one exists)."""
    on_gpu = device.startswith("cuda")
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if on_gpu else "cpu")
    import deepspeed

    if torch.distributed.is_initialized():
        return
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    if not on_gpu and os.environ["WORLD_SIZE"] == "1":
        # DeepSpeed's cpu backend JIT-builds its shared-memory all-reduce op on init (~50 s on two
        # cores), which only a multi-process cpu world uses; its op table is meant to be edited.
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lr_factor(step: int, cfg: LearnerConfig, total_steps: int | None) -> float:
    """Multiplier of `cfg.lr` at optimizer step `step` (0-based): linear warmup, then constant or a
    linear / cosine decay to `lr_min_ratio` over `lr_decay_steps` (default: the run's max_steps)."""
    if cfg.lr_warmup_steps and step < cfg.lr_warmup_steps:
        return (step + 1) / cfg.lr_warmup_steps
    horizon = cfg.lr_decay_steps or total_steps
    if cfg.lr_schedule == "constant" or not horizon:
        return 1.0
    progress = min(1.0, (step - cfg.lr_warmup_steps) / max(1, horizon - cfg.lr_warmup_steps))
    shape = 1.0 - progress if cfg.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.lr_min_ratio + (1.0 - cfg.lr_min_ratio) * shape


def deepspeed_config(cfg: LearnerConfig, on_gpu: bool) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": cfg.max_grad_norm,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": on_gpu and torch_dtype(cfg.dtype, cfg.device) == torch.bfloat16},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


class GrpoTrainer:
    """Owns the model, the LoRA adapter and the DeepSpeed engine of one learner process."""

    def __init__(self, model: str, cfg: LearnerConfig, grpo: GrpoConfig, *, temperature: float,
                 total_steps: int | None = None) -> None:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        init_distributed(cfg.device)
        import deepspeed

        self.cfg, self.grpo, self.temperature = cfg, grpo, temperature
        self.device = torch.device(cfg.device)
        self.on_gpu = self.device.type == "cuda"
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        base = AutoModelForCausalLM.from_pretrained(resolve_model(model), dtype=torch_dtype(cfg.dtype, cfg.device))
        if cfg.gradient_checkpointing:
            base.gradient_checkpointing_enable()
            base.enable_input_require_grads()
        lora = LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                          target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM")
        missing = [m for m in cfg.lora.target_modules
                   if not any(name.endswith("." + m) for name, _ in base.named_modules())]
        if missing:
            raise ValueError(f"learner.lora.target_modules {missing} match no module of {model}")
        self.model = get_peft_model(base.to(self.device), lora)
        self.pad_id = base.config.pad_token_id if base.config.pad_token_id is not None else 0
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg, total_steps))
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=self.model, optimizer=optimizer, lr_scheduler=scheduler,
            config=deepspeed_config(cfg, self.on_gpu))
        self.trainable_params = sum(p.numel() for p in params)
        self.optimizer_steps = 0

    # ---- one step -------------------------------------------------------------------------------
    def train_step(self, groups: list[Group], version: int) -> dict[str, float]:
        """Train on `groups` (sampled with versions <= `version`, the learner's current one).
        Returns the step's loss terms and counts, keyed as in DESIGN.md "Monitoring"."""
        t0 = time.monotonic()
        batch = assemble_batch(groups, self.grpo.std_scaling, version)
        mbs = [mb.to(self.device) for mb in micro_batches(batch.samples, self.cfg.micro_batch_size, self.pad_id)]
        self.engine.train()
        old: list[torch.Tensor] = []
        sums = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_tokens": 0.0, "entropy_tokens": 0.0,
                "mismatch_tokens": 0.0, "is_weight": 0.0, "is_masked": 0, "grad_norm": 0.0}
        counted = max(batch.global_tokens, 1)
        # Nothing to learn from (every group zero-variance, every completion truncated): no
        # optimizer step, or Adam's momentum would keep moving the weights on zero gradients.
        epochs = self.cfg.epochs_per_batch if batch.global_tokens else 0
        for epoch in range(epochs):
            for k, mb in enumerate(mbs):
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
            sums["grad_norm"] = self._grad_norm_then_step()
        elapsed = time.monotonic() - t0
        return self._stats(batch, sums, elapsed)

    def _logprobs(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Completion-token logprobs [b, T] (sampling temperature applied, as the generator did) and
        the per-token entropy of that distribution [b, T]. Only logits from the first completion
        position on are materialised (`logits_to_keep`): prompts are most of each row."""
        width = mb.input_ids.size(1)
        first = int(mb.positions[:, 0].min())
        out = self.engine(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                          logits_to_keep=width - first, use_cache=False)
        logits = out.logits                                                        # [b, width-first, V]
        idx = (mb.positions - first).clamp(min=0)                                  # [b, T]
        picked = logits.gather(1, idx[:, :, None].expand(-1, -1, logits.size(-1)))  # [b, T, V]
        logp = torch.log_softmax(picked.float() / self.temperature, dim=-1)
        token_logp = logp.gather(-1, mb.targets[:, :, None])[..., 0] * mb.mask      # [b, T]
        entropy = -(logp.exp() * logp).sum(-1) * mb.mask                           # [b, T]
        return token_logp, entropy

    @torch.no_grad()
    def _reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """The base model's logprobs: the same weights with the adapter switched off, so a KL
        term costs one forward and no second model."""
        with self.model.disable_adapter():
            return self._logprobs(mb)[0]

    def _grad_norm_then_step(self) -> float:
        """Optimizer step (DeepSpeed clips to max_grad_norm); returns the pre-clip gradient norm."""
        norm = None
        if self.cfg.zero_stage == 0:  # the engine reports no norm without ZeRO; grads are whole here
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))\
                if grads else 0.0
        self.engine.step()
        self.optimizer_steps += 1
        if norm is None:
            reported = self.engine.get_global_grad_norm()
            norm = float(reported) if reported is not None else float("nan")
        return norm

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
            "learner/truncated": batch.truncated,
            "learner/reward_mean": sum(batch.rewards) / len(batch.rewards),
            "learner/staleness_mean": sum(stale) / len(stale), "learner/staleness_max": max(stale),
            "learner/step_s": elapsed, "learner/skipped": float(tokens == 0),
            "learner/tokens_per_s": tokens * self.cfg.epochs_per_batch / elapsed if elapsed > 0 else 0.0,
        }

    # ---- adapters and checkpoints ---------------------------------------------------------------
    def save_adapter(self, directory: Path) -> None:
        """The trained adapter as a PEFT directory (what generators load). Under ZeRO-3 the LoRA
        weights are partitioned, so they are gathered first."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.cfg.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                self.model.save_pretrained(str(directory))
        else:
            self.model.save_pretrained(str(directory))

    def save_checkpoint(self, directory: Path, step: int, client_state: dict[str, Any]) -> Path:
        """DeepSpeed engine state (LoRA weights, optimizer, scheduler; frozen base weights left
        out) plus `client_state` and the RNGs, under tag `step-{step}`."""
        tag = f"{CHECKPOINT_PREFIX}{step}"
        state = {**client_state, "rng": _rng_state(), "optimizer_steps": self.optimizer_steps}
        self.engine.save_checkpoint(str(directory), tag=tag, client_state=state, exclude_frozen_parameters=True)
        return Path(directory) / tag

    def load_checkpoint(self, directory: Path, step: int) -> dict[str, Any]:
        """Restore `step-{step}`; returns its client state (with the RNGs already restored)."""
        tag = f"{CHECKPOINT_PREFIX}{step}"
        path, state = self.engine.load_checkpoint(str(directory), tag=tag, load_module_strict=False)
        if path is None:
            raise FileNotFoundError(f"no loadable DeepSpeed checkpoint {tag} under {directory}")
        _set_rng_state(state["rng"])
        self.optimizer_steps = int(state["optimizer_steps"])
        return state


def checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints under `directory`, ascending."""
    root = Path(directory)
    if not root.is_dir():
        return []
    steps = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX) and p.name[len(CHECKPOINT_PREFIX):].isdigit():
            if any(f.name.endswith("model_states.pt") for f in p.iterdir()):
                steps.append(int(p.name[len(CHECKPOINT_PREFIX):]))
    return sorted(steps)


def rotate_checkpoints(directory: Path, keep: int) -> list[int]:
    """Delete all but the newest `keep` checkpoints; returns the deleted steps."""
    gone = checkpoint_steps(directory)[:-keep]
    for step in gone:
        shutil.rmtree(Path(directory) / f"{CHECKPOINT_PREFIX}{step}")
    return gone


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
