"""Checks of the policy's model and backend before any actor starts.

A wrong model directory, a LoRA target the model lacks or a model too large for the GPU would
otherwise surface minutes later, inside a generator or learner actor that Ray restarts a few times
before giving up (or, for the GPU, after stage 1 spent its time). These checks read the model's
config and build its module tree on the meta device (no weights, no memory); the GPU's size comes
from `nvidia-smi`, so this process never opens a CUDA context.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from dataclasses import dataclass

from rl_kernels.config import Config, ConfigError
from rl_kernels.policy.models import missing_lora_targets, resolve_model


def check_policy(cfg: Config) -> None:
    """Raise ConfigError naming the key and the problem; return when the run can start."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        model_dir = resolve_model(cfg.policy.model)
    except FileNotFoundError as exc:
        raise ConfigError(f"policy.model: {exc}") from None
    try:
        model_config = AutoConfig.from_pretrained(model_dir)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"policy.model {model_dir}: not a transformers model directory ({exc})") from None
    architectures = list(getattr(model_config, "architectures", None) or [])
    if not any(a.endswith("ForCausalLM") for a in architectures):
        raise ConfigError(f"policy.model {model_dir} is not a causal LM (architectures {architectures}); "
                          "the policy must generate text (a *ForCausalLM model)")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config)
    missing = missing_lora_targets(model, cfg.learner.lora.target_modules)
    if missing:
        raise ConfigError(f"learner.lora.target_modules {missing} match no module of {model_dir} "
                          f"(its linear layers include {sorted(_linear_names(model))})")
    outer = [m for m in cfg.learner.lora.target_modules if m in _OUTER_MODULES]
    if cfg.policy.backend == "vllm" and outer:
        raise ConfigError(f"learner.lora.target_modules {outer} with policy.backend=vllm: vLLM serves embedding and "
                          "lm_head adapters only with extra engine settings, and its prompt logprobs (the delivery "
                          "check's) drop an lm_head delta (vllm-project/vllm#51594); target the decoder's linear layers")
    if cfg.policy.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError("policy.backend=vllm but vLLM is not installed: pip install 'rl-kernels[vllm]' "
                          "(vLLM >= 0.26), or use policy.backend=hf")
    if cfg.cluster.ray_address is None and _uses_gpu(cfg):   # a local Ray: this machine's GPU runs it
        _check_cuda_torch(cfg)
        gpu = local_gpu_memory_bytes()
        if gpu is not None:
            check_fits_gpu(cfg, ModelSize.of(model, model_config), gpu)


@dataclass(frozen=True)
class ModelSize:
    """What a causal LM needs in GPU memory, read from its config and its meta-device module tree."""

    params: int            # parameters
    kv_bytes_per_token: int   # K and V of every layer for one token, bf16
    vocab: int

    @classmethod
    def of(cls, model: object, model_config: object) -> "ModelSize":
        params = sum(p.numel() for p in model.parameters())   # type: ignore[attr-defined]
        layers = int(getattr(model_config, "num_hidden_layers", 0) or 0)
        heads = int(getattr(model_config, "num_attention_heads", 1) or 1)
        kv_heads = int(getattr(model_config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(model_config, "head_dim", None) or getattr(model_config, "hidden_size", 0) // heads)
        return cls(params, 2 * layers * kv_heads * head_dim * _BF16, int(getattr(model_config, "vocab_size", 0)))


_BF16 = 2
_GIB = 1024 ** 3


def check_fits_gpu(cfg: Config, size: ModelSize, gpu_bytes: int) -> None:
    """Raise ConfigError when the policy cannot fit the GPU of a local run: vLLM's share must hold the
    bf16 weights and one longest sequence's KV cache; where the learner shares the GPU with the
    generator (fractions of one device), that share, the learner's bf16 weights and the fp32 logits of
    one micro-batch must fit together. Lower bounds: a run refused here could never start, and one
    that passes may still need more (activations, the timer's input pool)."""
    weights = size.params * _BF16
    what = f"policy.model {cfg.policy.model} ({size.params / 1e9:.2f}B parameters, {weights / _GIB:.1f} GiB in bf16)"
    share = 0.0
    if cfg.policy.backend == "vllm" and cfg.policy.device.startswith("cuda"):
        v = cfg.policy.vllm
        share = v.gpu_memory_utilization * gpu_bytes * v.tensor_parallel_size
        engine = weights + size.kv_bytes_per_token * v.max_model_len
        if engine > share:
            raise ConfigError(
                f"{what} does not fit vLLM's share of the GPU: the weights and one {v.max_model_len}-token "
                f"sequence's KV cache need {engine / _GIB:.1f} GiB, policy.vllm.gpu_memory_utilization "
                f"{v.gpu_memory_utilization} of {gpu_bytes / _GIB:.1f} GiB gives {share / _GIB:.1f} GiB; raise "
                "it, lower policy.vllm.max_model_len, spread the engine (policy.vllm.tensor_parallel_size) or "
                "take a smaller model")
    shared = cfg.learner.device.startswith("cuda") and cfg.learner.num_gpus < 1 and cfg.cluster.generator_num_gpus < 1
    if shared:
        seq = cfg.policy.vllm.max_model_len if cfg.policy.backend == "vllm" else cfg.policy.max_new_tokens
        logits = cfg.learner.micro_batch_size * seq * size.vocab * 4
        need = share + weights + logits
        if need > gpu_bytes:
            raise ConfigError(
                f"{what} does not fit one GPU shared by generator and learner: vLLM's share "
                f"{share / _GIB:.1f} GiB + the learner's weights {weights / _GIB:.1f} GiB + one micro-batch's "
                f"fp32 logits {logits / _GIB:.1f} GiB (learner.micro_batch_size {cfg.learner.micro_batch_size} x "
                f"{seq} tokens x {size.vocab} vocabulary) = {need / _GIB:.1f} GiB > {gpu_bytes / _GIB:.1f} GiB; "
                "give the learner its own GPU, lower learner.micro_batch_size or the engine's share, or take a "
                "smaller model")


def _uses_gpu(cfg: Config) -> bool:
    return (cfg.eval.backend == "cuda" or cfg.policy.device.startswith("cuda")
            or cfg.learner.device.startswith("cuda"))


def _check_cuda_torch(cfg: Config) -> None:
    import torch

    if torch.version.cuda is None:
        keys = [k for k, on in (("eval.backend=cuda", cfg.eval.backend == "cuda"),
                                (f"policy.device={cfg.policy.device}", cfg.policy.device.startswith("cuda")),
                                (f"learner.device={cfg.learner.device}", cfg.learner.device.startswith("cuda")))
                if on]
        raise ConfigError(f"{', '.join(keys)} on a local Ray, but torch {torch.__version__} here is a CPU build: "
                          "install a CUDA build of torch on this machine, or run the cpu configs (configs/local.yaml)")


def local_gpu_memory_bytes() -> int | None:
    """Memory of this machine's first GPU as `nvidia-smi` reports it; None without a GPU or the tool."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return int(out.split()[0]) * 1024 * 1024
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return None


_OUTER_MODULES = {"lm_head", "embed_tokens", "wte", "embed_in", "embed_out"}
"""Module names of the input embedding and the output head in common causal LMs."""


def _linear_names(model: object) -> set[str]:
    import torch

    return {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
