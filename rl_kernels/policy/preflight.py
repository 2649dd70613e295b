"""Checks of the policy's model and backend before any actor starts.

A wrong model directory or a LoRA target the model lacks would otherwise surface minutes later,
inside a generator or learner actor that Ray restarts a few times before giving up. These checks
read the model's config and build its module tree on the meta device (no weights, no memory).
"""

from __future__ import annotations

import importlib.util

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


_OUTER_MODULES = {"lm_head", "embed_tokens", "wte", "embed_in", "embed_out"}
"""Module names of the input embedding and the output head in common causal LMs."""


def _linear_names(model: object) -> set[str]:
    import torch

    return {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
