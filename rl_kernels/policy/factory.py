"""From `PolicyConfig` to a backend and its sampling parameters, so the generator actor, the CLI
and tests build the policy one way.

The backend module is imported only when one is built: transformers (hf) and vLLM are heavy, and
callers that only need `sampling_params` should not pay for them.
"""

from __future__ import annotations

import torch

from rl_kernels.config import PolicyConfig
from rl_kernels.host_share import HostShare
from rl_kernels.policy.base import PolicyBackend, SamplingParams
from rl_kernels.policy.delivery import DeliveryCheckedPolicy


def torch_dtype(dtype: str, device: str) -> torch.dtype:
    """`policy.dtype` as a torch dtype.  "auto" is fp32 on cpu (CPU bf16 matmuls are slow and
    lossy) and bf16 on cuda (the training dtype of the learner)."""
    if dtype == "auto":
        return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def make_policy(cfg: PolicyConfig, *, max_loaded_adapters: int, host: HostShare | None = None) -> DeliveryCheckedPolicy:
    """Build the configured backend, wrapped in the adapter delivery check. Pass max_loaded_adapters
    = rollout.max_staleness + 2, so a request still in flight on the oldest admissible version finds
    its adapter loaded, and the host share when a timer measures on this host's cores or GPU
    (`eval.quiet_host`)."""
    backend: PolicyBackend
    if cfg.backend == "hf":
        from rl_kernels.policy.hf import HFPolicy

        backend = HFPolicy(
            cfg.model,
            device=cfg.device,
            dtype=torch_dtype(cfg.dtype, cfg.device),
            max_loaded_adapters=max_loaded_adapters,
            batch_size=cfg.batch_size,
            init_adapter=cfg.init_adapter,
            host=host,
        )
    else:
        from rl_kernels.policy.vllm_engine import build_vllm_policy

        backend = build_vllm_policy(cfg, max_loaded_adapters=max_loaded_adapters, host=host)
    return DeliveryCheckedPolicy(backend, cfg.delivery_tolerance, cfg.delivery_min_shift,
                                 cfg.delivery_noise_multiple)


def sampling_params(cfg: PolicyConfig, seed: int | None) -> SamplingParams:
    """How one group is sampled: `group_size` completions of one prompt.  Give each group its own
    seed (or None for fresh randomness) so groups differ while a run stays reproducible."""
    return SamplingParams(
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        n=cfg.group_size,
        seed=seed,
    )
