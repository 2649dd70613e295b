"""Policy backends: sample completions from the current (or a recent) LoRA version of the LLM.

The backends themselves (`rl_kernels.policy.hf.HFPolicy`) are imported from their modules, so
importing the interface does not pull in transformers; `rl_kernels.policy.factory.make_policy`
builds the one `PolicyConfig` names.
"""

from rl_kernels.policy.base import (
    BASE_VERSION,
    Completion,
    FinishReason,
    Messages,
    PolicyBackend,
    SamplingParams,
    adapter_name,
)
from rl_kernels.policy.models import resolve_model

__all__ = [
    "BASE_VERSION",
    "Completion",
    "FinishReason",
    "Messages",
    "PolicyBackend",
    "SamplingParams",
    "adapter_name",
    "resolve_model",
]
