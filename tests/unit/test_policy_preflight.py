"""Policy errors before any actor starts: each names the config key and what is wrong."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from tiny_model import save_tiny_llama

from rl_kernels.config import Config, ConfigError, load_config
from rl_kernels.policy.models import missing_lora_targets
from rl_kernels.policy.preflight import ModelSize, check_fits_gpu, check_policy

REPO = Path(__file__).resolve().parents[2]


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


SMOLLM2_135M = ModelSize(params=134_515_008, kv_bytes_per_token=2 * 30 * 3 * 64 * 2, vocab=49152)
SEVENTY_B = ModelSize(params=70_553_706_496, kv_bytes_per_token=2 * 80 * 8 * 128 * 2, vocab=128256)
H100 = 80 * 1024**3


def _gpu_cfg(**sections: dict) -> Config:
    return load_config(REPO / "configs" / "gpu_train.yaml", [f"{k}={v}" for k, v in sections.items()])


def test_the_one_gpu_config_fits_an_h100() -> None:
    check_fits_gpu(_gpu_cfg(), SMOLLM2_135M, H100)


def test_a_model_larger_than_vllms_share_is_refused_with_the_figures() -> None:
    with pytest.raises(ConfigError, match=r"70.55B parameters, 131.4 GiB in bf16\) does not fit vLLM's share .* "
                                          r"policy.vllm.gpu_memory_utilization 0.25 of 80.0 GiB gives 20.0 GiB"):
        check_fits_gpu(_gpu_cfg(), SEVENTY_B, H100)


def test_a_learner_beside_the_engine_on_one_gpu_counts_its_logits() -> None:
    cfg = _gpu_cfg(**{"learner.micro_batch_size": 64})   # 64 x 5120 tokens x 49152 x 4 bytes = 60 GiB
    with pytest.raises(ConfigError, match=r"does not fit one GPU shared by generator and learner: .* fp32 logits "
                                          r"60.0 GiB \(learner.micro_batch_size 64"):
        check_fits_gpu(cfg, SMOLLM2_135M, H100)
    check_fits_gpu(_gpu_cfg(**{"learner.micro_batch_size": 64, "learner.num_gpus": 1}), SMOLLM2_135M, H100)


def test_the_model_size_is_read_from_the_config(model_dir: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    size = ModelSize.of(model, config)
    assert size.params == sum(p.numel() for p in model.parameters()) > 0
    head_dim = config.hidden_size // config.num_attention_heads
    assert size.kv_bytes_per_token == 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 2
    assert size.vocab == config.vocab_size


def test_a_cuda_run_on_a_cpu_build_of_torch_is_refused_before_anything_starts(model_dir: Path) -> None:
    import torch

    if torch.version.cuda is not None:
        pytest.skip("torch here is a CUDA build")
    with pytest.raises(ConfigError, match=r"eval.backend=cuda on a local Ray, but torch .* is a CPU build"):
        check_policy(_cfg(model_dir, eval={"backend": "cuda"}))


def test_a_graph_that_needs_a_gpu_this_machine_lacks_stops_before_stage_1(model_dir: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A CUDA build of torch on a machine without a visible GPU (the CPU build is refused earlier)."""
    import torch

    from rl_kernels.cli import main

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "13.0")
    run = tmp_path / "run"
    code = main(["train", "--config", str(REPO / "configs" / "local.yaml"), f"run_dir={run}",
                 f"policy.model={model_dir}", "learner.device=cuda", "learner.num_gpus=1"])
    assert code == 2
    assert "error: learner 0 needs 1 CPU(s) and 1 GPU(s) on one node (missing 1 GPUs)" in capsys.readouterr().err
    assert not run.exists(), "nothing started: no run directory, no warm start"
