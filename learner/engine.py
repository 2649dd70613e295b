"""The trained policy as both trainers hold it: a LoRA (PEFT) adapter on a transformers causal LM,
optimised through a DeepSpeed engine, with the token logprobs and the optimizer step they share.

GRPO (learner/trainer.py) and the supervised warm start (learner/sft.py) differ only in their loss;
building the model, the adapter and the engine, reading completion-token logprobs and saving the
adapter live here once, so an adapter from the warm start is exactly what GRPO continues.

DeepSpeed picks its accelerator when first imported, from DS_ACCELERATOR; `init_distributed`
sets it from the learner's device first. A single learner process forms a world of one (gloo on
cpu, nccl on cuda); ZeRO stages 0-3 all work there, on CPU too.
"""

from __future__ import annotations

import math
import os
import random
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rl_kernels.learner.batch import MicroBatch
from rl_kernels.config import LearnerConfig
from rl_kernels.policy.delivery import (MAGNIFICATION_STEP, MAX_MAGNIFICATION, Probe, mean_abs_gap,
                                        next_token_logprobs, probe_token_ids, write_probe)
from rl_kernels.policy.factory import torch_dtype
from rl_kernels.policy.models import load_causal_lm, missing_lora_targets, resolve_model


@dataclass
class PolicyEngine:
    model: Any            # the PEFT model (base weights frozen, adapter trainable), or the whole model
    engine: Any           # deepspeed.DeepSpeedEngine wrapping `model`
    scheduler: Any        # the LR scheduler the engine steps
    pad_id: int
    trainable_params: int
    zero_stage: int
    optimizer_steps: int = 0   # taken so far (a checkpoint keeps it)


def init_distributed(device: str) -> None:
    """A one-process torch.distributed world for DeepSpeed (no-op when one exists)."""
    on_gpu = device.startswith("cuda")
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if on_gpu else "cpu")
    import deepspeed

    if torch.distributed.is_initialized():
        return
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    own_port = "MASTER_PORT" not in os.environ
    if own_port:
        os.environ["MASTER_PORT"] = str(_free_port())
    if not on_gpu and os.environ["WORLD_SIZE"] == "1":
        # DeepSpeed's cpu backend JIT-builds its shared-memory all-reduce op on init (~50 s on two
        # cores), which only a multi-process cpu world uses; its op table is meant to be edited.
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False)
    if own_port:
        # This world's store now listens on that port; a process started from here later (a Ray
        # worker of the same driver) must not inherit it as its own rendezvous port.
        del os.environ["MASTER_PORT"]


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


def build_policy_engine(model: str, cfg: LearnerConfig, lr_lambda: Any, init_adapter: Path | None = None,
                        full: bool = False) -> PolicyEngine:
    """Base model (with `init_adapter`, a warm start's PEFT directory, merged into its weights, as
    the generators load it) + a fresh LoRA adapter from `cfg.lora` + AdamW + DeepSpeed, in a
    distributed world set up first (`init_distributed`).  `full` trains every weight instead of an
    adapter (the warm start's full fine-tuning; GRPO always trains an adapter)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    device = torch.device(cfg.device)
    base = load_causal_lm(model, torch_dtype(cfg.dtype, cfg.device), init_adapter)
    if cfg.gradient_checkpointing:
        base.gradient_checkpointing_enable()
        base.enable_input_require_grads()
    if full:
        return _engine(base.to(device), cfg, lr_lambda, device)
    missing = missing_lora_targets(base, cfg.lora.target_modules)
    if missing:
        raise ValueError(f"learner.lora.target_modules {missing} match no module of {model}")
    lora = LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM")
    return _engine(get_peft_model(base.to(device), lora), cfg, lr_lambda, device)


def _engine(model: Any, cfg: LearnerConfig, lr_lambda: Any, device: torch.device) -> PolicyEngine:
    """AdamW over `model`'s trainable parameters, wrapped in a DeepSpeed engine."""
    import deepspeed

    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    engine, _, _, scheduler = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                                   config=deepspeed_config(cfg, device.type == "cuda"))
    return PolicyEngine(model, engine, scheduler, pad_id, sum(p.numel() for p in params), cfg.zero_stage)


LOGIT_ROWS = 256
"""Completion tokens whose full-vocabulary logits exist at once in `token_logprobs` (forward and
backward): SmolLM2's 49152-word vocabulary costs 0.2 MB a token in fp32, so 256 rows are 50 MB,
where two 1200-token completions' logits and their softmax copies took gigabytes."""


def token_logprobs(pe: PolicyEngine, mb: MicroBatch, temperature: float,
                   rows_per_chunk: int = LOGIT_ROWS) -> tuple[torch.Tensor, torch.Tensor]:
    """Completion-token logprobs [b, T] (at `temperature`, as the generator sampled) and the per-token
    entropy of that distribution [b, T], 0 on padding.

    The model runs without its output head on the sequence: the head's input (the final hidden
    states) is captured, and the head, softmax and gather run over `rows_per_chunk` completion
    tokens at a time, each chunk recomputed in the backward pass instead of kept (activation
    checkpointing of the head). Memory for logits is then [rows_per_chunk, V] instead of several
    [b, T, V] copies, for one more head matmul per token in the backward; the values are the
    full-logit computation's (tests/unit/test_token_logprobs.py)."""
    first = int(mb.positions[:, 0].min())
    hidden = _final_hidden(pe, mb, mb.input_ids.size(1) - first)               # [b, width-first, H]
    idx = (mb.positions - first).clamp(min=0)                                  # [b, T]
    counted = mb.mask.bool()                                                   # [b, T]
    rows = hidden.gather(1, idx[:, :, None].expand(-1, -1, hidden.size(-1)))[counted]   # [N, H]
    targets = mb.targets[counted]                                              # [N]
    head = pe.model.get_output_embeddings()
    chunks = [_chunk_logprobs(head, rows[s:s + rows_per_chunk], targets[s:s + rows_per_chunk], temperature)
              for s in range(0, max(rows.size(0), 1), rows_per_chunk)]   # one chunk even when empty: a graph
    logp = torch.cat([c[0] for c in chunks])                                   # [N]
    entropy = torch.cat([c[1] for c in chunks])                                # [N]
    zeros = torch.zeros(mb.mask.shape, dtype=logp.dtype, device=logp.device)   # [b, T]
    return zeros.masked_scatter(counted, logp), zeros.masked_scatter(counted, entropy.detach())


def _final_hidden(pe: PolicyEngine, mb: MicroBatch, keep: int) -> torch.Tensor:
    """The output head's input over the last `keep` positions [b, keep, H], from a forward through
    the engine whose head sees one position only. A model that changes its logits after the head
    (a soft cap, a scale) would make the chunked logprobs wrong: refused, by comparing that one
    position's logits with the head's."""
    head = pe.model.get_output_embeddings()
    captured: list[torch.Tensor] = []

    def one_position(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        captured.append(args[0])
        return (args[0][:, -1:], *args[1:])

    handle = head.register_forward_pre_hook(one_position)
    try:
        out = pe.engine(input_ids=mb.input_ids, attention_mask=mb.attention_mask, logits_to_keep=keep,
                        use_cache=False)
    finally:
        handle.remove()
    if len(captured) != 1:
        raise ValueError(f"the model called its output head {len(captured)} times in one forward; "
                         "token_logprobs needs the head's input once")
    hidden = captured[0]
    with torch.no_grad():
        if not torch.equal(out.logits[:, -1], head(hidden[:, -1:])[:, -1]):
            raise ValueError("the model's logits are not its output head's: token_logprobs cannot chunk them")
    return hidden


def _chunk_logprobs(head: Any, rows: torch.Tensor, targets: torch.Tensor,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob of each target [n], entropy [n]) from `rows` [n, H]; under autograd the [n, V]
    logits are recomputed in the backward pass rather than kept."""
    def compute(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = torch.log_softmax(head(rows).float() / temperature, dim=-1)   # [n, V]
        return logp.gather(-1, targets[:, None])[:, 0], -(logp.exp() * logp).sum(-1)
    if not torch.is_grad_enabled():
        return compute(rows)
    from torch.utils.checkpoint import checkpoint

    # Non-reentrant, so every chunk's gradient for the head's weight (the embedding's, when tied)
    # joins the one backward pass: ZeRO-2 reduces a weight's gradient once per step. Unchecked: under
    # ZeRO-3 the recomputation sees the head's gathered weight where the forward saw its partition.
    return checkpoint(compute, rows, use_reentrant=False, determinism_check="none")


def grad_norm_then_step(pe: PolicyEngine) -> float:
    """Optimizer step (DeepSpeed clips to max_grad_norm); returns the pre-clip gradient norm."""
    norm = None
    if pe.zero_stage == 0:  # the engine reports no norm without ZeRO; grads are whole here
        grads = [p.grad for p in pe.model.parameters() if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))) \
            if grads else 0.0
    pe.engine.step()
    pe.optimizer_steps += 1
    if norm is None:
        reported = pe.engine.get_global_grad_norm()
        norm = float(reported) if reported is not None else float("nan")
    return norm


def save_adapter_with_probe(pe: PolicyEngine, directory: Path, model: str, magnify_to: float = 0.0) -> None:
    """The trained adapter as a PEFT directory, with the probe generators check it against before
    they sample from it (rl_kernels/policy/delivery.py); `magnify_to` as in `adapter_probe`."""
    save_trained(pe, directory)
    from transformers import AutoTokenizer

    token_ids = probe_token_ids(AutoTokenizer.from_pretrained(resolve_model(model)))
    write_probe(directory, adapter_probe(pe, token_ids, magnify_to))


@torch.no_grad()
def adapter_probe(pe: PolicyEngine, token_ids: list[int], magnify_to: float = 0.0) -> Probe:
    """The probe of the engine that trains (eval mode, so LoRA dropout is off): see `probe_of`."""
    ids = torch.tensor([token_ids], dtype=torch.long, device=next(pe.model.parameters()).device)   # [1, L]
    training = pe.engine.training
    pe.engine.eval()
    try:
        return probe_of(pe.model, lambda: _sequence_logprobs(pe, ids), token_ids, magnify_to)
    finally:
        pe.engine.train(training)


@torch.no_grad()
def probe_of(model: Any, logprobs: Callable[[], list[float]], token_ids: list[int], magnify_to: float) -> Probe:
    """The probe sequence's logprobs (temperature 1) under a PEFT `model`'s adapter and under its base;
    `logprobs()` runs the model on the probe as it stands. When the adapter moves them by less than
    `magnify_to` nats/token on average, also under the adapter with its LoRA scaling magnified 4, 16,
    64, ... times, up to the first factor that moves them that far (policy.delivery_magnify_to; 0
    never magnifies)."""
    adapter = logprobs()
    with model.disable_adapter():
        base = logprobs()
    factor, magnified = 1.0, adapter
    while mean_abs_gap(magnified, base) < magnify_to and factor < MAX_MAGNIFICATION:
        factor *= MAGNIFICATION_STEP
        with _lora_scaling_times(model, factor):
            magnified = logprobs()
    return Probe(token_ids=list(token_ids), adapter_logprobs=adapter, base_logprobs=base, magnification=factor,
                 magnified_logprobs=magnified if factor > 1 else None)


@contextmanager
def _lora_scaling_times(model: Any, factor: float) -> Iterator[None]:
    """Every LoRA layer's scaling (alpha / r) multiplied by `factor`, restored on exit: the update
    B @ A times `factor` without touching a weight (so under every ZeRO stage), which is what a
    generator serves from the adapter files with lora_alpha times `factor`."""
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if not layers:
        raise ValueError("the model has no LoRA layers to magnify")
    saved = [dict(m.scaling) for m in layers]
    try:
        for m in layers:
            m.scaling.update({name: value * factor for name, value in m.scaling.items()})
        yield
    finally:
        for m, scaling in zip(layers, saved):
            m.scaling.clear()
            m.scaling.update(scaling)


def _sequence_logprobs(pe: PolicyEngine, ids: torch.Tensor) -> list[float]:
    return next_token_logprobs(pe.engine(input_ids=ids, use_cache=False).logits[0], ids[0])   # [L-1]


def save_trained(pe: PolicyEngine, directory: Path) -> None:
    """What the engine trains, saved for loading: the adapter as a PEFT directory (what generators
    load), or with full fine-tuning the whole model's weights and config. Under ZeRO-3 the trained weights are partitioned, so they are
    gathered first."""
    params = [p for p in pe.model.parameters() if p.requires_grad]
    if pe.zero_stage == 3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            pe.model.save_pretrained(str(directory))
    else:
        pe.model.save_pretrained(str(directory))
