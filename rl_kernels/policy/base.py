"""The policy interface every generation backend implements (hf and vLLM).

A completion carries everything the learner needs to compute importance weights against the
behaviour policy without re-running it: the exact token ids, the per-token logprob under the
distribution it was sampled from, the adapter version that produced it, and whether it was cut off.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

FinishReason = Literal["stop", "length"]
Messages = list[dict[str, str]]

BASE_VERSION = 0
"""Version 0 is the base model with no adapter: the policy before the first learner step."""


def adapter_name(version: int) -> str:
    """The name an adapter is loaded under, shared by every backend so versions are comparable."""
    return f"policy-v{version}"


@dataclass(frozen=True)
class SamplingParams:
    """How to sample.  Defaults are the RL setting: plain temperature-1 sampling, no truncation
    of the distribution, so behaviour logprobs are those of the policy itself."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature <= 0.0:
            raise ValueError(f"temperature must be > 0 (sampling only), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@dataclass(frozen=True)
class Completion:
    """One sampled answer.

    `logprobs[i]` is log p(token_ids[i]) under the sampling distribution actually used: log-softmax
    of logits / temperature, after top-k / top-p masking when those are set.  `token_ids` include
    the stop token when finish_reason is "stop", so its logprob is trained too.
    """

    text: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    adapter_version: int
    finish_reason: FinishReason
    truncated: bool


class PolicyBackend(Protocol):
    """A sampler for the current and recent policy versions."""

    def generate(
        self, prompts: list[Messages], params: SamplingParams, adapter_version: int
    ) -> list[list[Completion]]:
        """Sample `params.n` completions per chat prompt with the given adapter version."""
        ...

    def load_adapter(self, version: int, path: Path) -> None:
        """Make `policy-v{version}` (a PEFT adapter directory) available to `generate`."""
        ...

    def loaded_versions(self) -> list[int]:
        """Versions `generate` accepts now, ascending (0, the base model, is always there)."""
        ...

    def score(self, token_ids: list[int], adapter_version: int) -> list[float]:
        """log p(token_ids[i] | token_ids[:i]) for i >= 1 under `adapter_version` at temperature 1:
        what the adapter delivery check compares with the learner's own logprobs."""
        ...
