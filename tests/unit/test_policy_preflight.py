"""Policy errors before any actor starts: each names the config key and what is wrong."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from tiny_model import save_tiny_llama

from rl_kernels.config import Config, ConfigError
from rl_kernels.policy.models import missing_lora_targets
from rl_kernels.policy.preflight import check_policy


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


def _cfg(model: Path | str, **sections: dict) -> Config:
    return Config(**{"policy": {"model": str(model)}, **sections})


def test_a_usable_model_passes(model_dir: Path) -> None:
    check_policy(_cfg(model_dir))


def test_a_missing_model_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"policy.model: model '.*nowhere' is neither a model directory"):
        check_policy(_cfg(tmp_path / "nowhere"))


def test_a_model_that_is_not_a_causal_lm_is_refused(model_dir: Path, tmp_path: Path) -> None:
    encoder = tmp_path / "encoder"
    encoder.mkdir()
    config = json.loads((model_dir / "config.json").read_text())
    (encoder / "config.json").write_text(json.dumps({**config, "architectures": ["LlamaModel"]}))
    with pytest.raises(ConfigError, match=r"is not a causal LM \(architectures \['LlamaModel'\]\)"):
        check_policy(_cfg(encoder))


def test_lora_targets_the_model_lacks_are_named(model_dir: Path) -> None:
    cfg = _cfg(model_dir, learner={"lora": {"target_modules": ["q_proj", "query_key_value"]}})
    with pytest.raises(ConfigError, match=r"\['query_key_value'\] match no module .* include \[.*'q_proj'"):
        check_policy(cfg)


@pytest.mark.parametrize("targets", [["lm_head"], ["self_attn.q_proj", "mlp.down_proj"], ["q_proj", "v_proj"]])
def test_the_preflight_and_the_learner_match_targets_as_peft_does(model_dir: Path, targets: list[str]) -> None:
    """A top-level module and dotted names are valid PEFT targets: the preflight passes them, the
    shared rule finds nothing missing, and PEFT itself adapts them."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    check_policy(_cfg(model_dir, learner={"lora": {"target_modules": targets}}))
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert missing_lora_targets(model, targets) == []
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=targets))
    assert any("lora_A" in name for name, _ in peft_model.named_parameters())
    assert missing_lora_targets(model, ["proj", "query_key_value"]) == ["proj", "query_key_value"]   # no suffix match


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_the_vllm_backend_without_vllm_says_how_to_install_it(model_dir: Path) -> None:
    cfg = _cfg(model_dir, policy={"model": str(model_dir), "backend": "vllm", "device": "cuda"},
               cluster={"generator_num_gpus": 1})
    with pytest.raises(ConfigError, match=r"pip install 'rl-kernels\[vllm\]'"):
        check_policy(cfg)


def test_vllm_settings_that_cannot_serve_the_learner_are_config_errors() -> None:
    on_gpu = {"policy": {"backend": "vllm", "device": "cuda"}, "cluster": {"generator_num_gpus": 1}}
    with pytest.raises(ValueError, match=r"learner.lora.rank 32 is above policy.vllm.max_lora_rank 16"):
        Config(**on_gpu, learner={"lora": {"rank": 32}})
    with pytest.raises(ValueError, match=r"tensor_parallel_size 2 differs from cluster.generator_num_gpus 1"):
        Config(policy={**on_gpu["policy"], "vllm": {"tensor_parallel_size": 2}}, cluster={"generator_num_gpus": 1})
    with pytest.raises(ValueError, match="needs a GPU"):
        Config(policy={"backend": "vllm"})


def test_embedding_and_head_adapters_are_refused_for_vllm(model_dir: Path) -> None:
    targets = {"learner": {"lora": {"target_modules": ["q_proj", "lm_head"]}}}
    check_policy(_cfg(model_dir, **targets))   # hf serves an lm_head adapter through PEFT
    cfg = _cfg(model_dir, policy={"model": str(model_dir), "backend": "vllm", "device": "cuda"},
               cluster={"generator_num_gpus": 1}, **targets)
    with pytest.raises(ConfigError, match=r"\['lm_head'\] with policy.backend=vllm"):
        check_policy(cfg)


def test_extra_generator_slots_are_refused_for_hf() -> None:
    with pytest.raises(ValueError, match="generator_slots 4 with policy.backend hf"):
        Config(cluster={"generator_slots": 4})
