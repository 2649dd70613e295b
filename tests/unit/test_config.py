from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

import rl_kernels.config as config_module
from rl_kernels.config import ConfigError, dump_config, load_config

REPO = Path(__file__).resolve().parents[2]


def test_yaml_and_dotted_overrides() -> None:
    cfg = load_config(REPO / "configs" / "local.yaml",
                      ["eval.timing.samples=50", "eval.build.cuda_archs=[sm_80, sm_90a]"])
    assert cfg.eval.backend == "cpu"
    assert cfg.eval.timing.samples == 50
    assert cfg.eval.build.cuda_archs == ["sm_80", "sm_90a"]
    assert load_config(None, []).eval.timing.samples == 30


@pytest.mark.parametrize("override, names", [
    ("eval.nonsense=1", "eval.nonsense"),
    ("eval.timing.samples=10", "eval.timing.samples"),
    ("eval.build.cuda_archs=[compute_90]", "eval.build.cuda_archs"),
    ("eval.reward.min_correct_reward=-1", "min_correct_reward"),
    ("eval.correctness.num_input_sets=2", "eval.correctness.num_input_sets"),
])
def test_bad_values_name_the_key(override: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load_config(None, [override])


def test_prestart_off_reads_as_off_in_a_file_and_an_override(tmp_path: Path) -> None:
    """YAML 1.1 reads a bare `off` as false; the field takes it as the mode it names."""
    path = tmp_path / "off.yaml"
    path.write_text("eval:\n  sandbox:\n    prestart: off\n")
    assert load_config(path).eval.sandbox.prestart == "off"
    assert load_config(None, ["eval.sandbox.prestart=off"]).eval.sandbox.prestart == "off"
    with pytest.raises(ConfigError, match=r"eval\.sandbox\.prestart"):
        load_config(None, ["eval.sandbox.prestart=on"])


def test_malformed_override_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["eval.backend"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_dump_round_trips(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "h200.yaml")
    path = tmp_path / "resolved.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg


def test_cli_dry_run_prints_resolved_config() -> None:
    out = subprocess.run([sys.executable, "-m", "rl_kernels.cli", "bench", "--seeds", "--dry-run",
                          "--config", str(REPO / "configs" / "local.yaml"), "eval.timing.samples=40"],
                         capture_output=True, text=True, check=True)
    assert "samples: 40" in out.stdout and "backend: cpu" in out.stdout


def test_cli_tasks_list_and_unknown_task() -> None:
    out = subprocess.run([sys.executable, "-m", "rl_kernels.cli", "tasks", "list", "--suite", "builtin"],
                         capture_output=True, text=True, check=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("builtin/")]
    assert len(lines) >= 12 and all("\tmodule\t" in ln for ln in lines)
    out = subprocess.run([sys.executable, "-m", "rl_kernels.cli", "tasks", "list", "--suite", "hgemm/fp32",
                          "--limit", "3"], capture_output=True, text=True, check=True)
    assert "# hgemm/fp32: 1000 tasks" in out.stdout and "hgemm/fp32/64_64_64" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "rl_kernels.cli", "eval", "--task", "builtin/sofmax",
                          "--candidate", str(REPO / "README.md")], capture_output=True, text=True)
    assert bad.returncode == 2 and "builtin/softmax" in bad.stderr


@pytest.mark.parametrize("overrides, message", [
    (["policy.device=cuda"], "generator_num_gpus is 0"),
    (["cluster.generator_num_gpus=1"], "reserves GPUs nobody uses"),
    (["eval.backend=cuda", "policy.device=cuda", "cluster.generator_num_gpus=0.5"], "shared_device=true"),
    (["policy.backend=vllm"], "vllm needs a GPU"),
    (["rollout.max_groups=null"], "never ends"),
    (["cluster.num_timers=0"], "num_timers"),
])
def test_impossible_combinations_fail_before_anything_starts(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_single_gpu_smoke_run_must_say_it_shares_the_device() -> None:
    cfg = load_config(None, ["eval.backend=cuda", "policy.device=cuda", "cluster.generator_num_gpus=0.5",
                             "eval.shared_device=true"])
    assert cfg.eval.shared_device and cfg.cluster.generator_num_gpus == 0.5


def test_an_initial_adapter_must_be_an_adapter_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a PEFT adapter directory"):
        load_config(None, [f"policy.init_adapter={tmp_path}"])
    (tmp_path / "adapter_config.json").write_text("{}")
    assert load_config(None, [f"policy.init_adapter={tmp_path}"]).policy.init_adapter == tmp_path


def test_every_config_field_has_a_description() -> None:
    """Project rule: every config field says in one line what it means, its unit and its trade-off."""
    models = [obj for obj in vars(config_module).values()
              if inspect.isclass(obj) and issubclass(obj, pydantic.BaseModel)
              and obj.__module__ == config_module.__name__]
    assert models, "no pydantic models found in rl_kernels.config"
    missing = [f"{model.__name__}.{name}" for model in models for name, info in model.model_fields.items()
               if not (info.description or "").strip()]
    assert not missing, f"config fields without a description: {missing}"
