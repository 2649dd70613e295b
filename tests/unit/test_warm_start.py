"""`rl-kernels sft` end to end on this machine: a JSONL of hgemm kernels (one broken), re-verified by
the real evaluator (cpu backend), a LoRA adapter trained on a tiny Llama, the trained policy sampled
and its answers parsed, everything reported in run_dir/sft/."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from processes import gone
from tiny_model import save_tiny_llama
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_kernels.learner.warm_start_cache import cached_warm_start, default_cache_dir, start_from, warm_start_key
from rl_kernels.cli import main
from rl_kernels.config import load_config
from rl_kernels.tasks import get_task

HGEMM = "hgemm/fp32/64_64_64"


def test_the_warm_start_job_verifies_trains_samples_and_reports(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    seed = get_task(HGEMM).seeds["cpu"]
    data = tmp_path / "kernels.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in (
        {"task": HGEMM, "source": seed, "analysis": "### Algorithm design\nOne row per thread."},
        {"task": HGEMM, "source": "// the same kernel, another copy\n" + seed},
        {"task": HGEMM, "source": seed + "\nint broken(\n"},
        {"task": "builtin/nope", "source": "x"},
    )))
    model = save_tiny_llama(tmp_path / "tiny")
    run = tmp_path / "run"
    code = main(["sft", f"run_dir={run}", f"policy.model={model}", "policy.max_new_tokens=8", "learner.zero_stage=0",
                 "learner.lr=0.01", f"eval.build.cache_dir={tmp_path / 'cache'}", "sft.epochs=3", "sft.batch_size=1",
                 "sft.heldout_fraction=0.5", "sft.sample_after=1", "sft.max_answer_tokens=64",
                 f'sft.sources=[{{"kind": "jsonl", "path": "{data}"}}]'])
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    report = json.loads((run / "sft" / "report.json").read_text())
    assert report["read"] == 3 and report["skipped"] == {"unknown_task": 1}
    assert report["verified"] == 2 and report["refused"] == {"compile_error": 1}
    assert report["train_examples"] == 1 and report["heldout_examples"] == 1 and len(report["losses"]) == 3
    assert report["losses"][-1] < report["losses"][0]
    assert report["heldout_loss_after"] is not None and report["samples"]["sampled"] == 1
    assert (run / "sft" / "adapter" / "adapter_config.json").is_file()
    assert len((run / "sft" / "metrics.jsonl").read_text().splitlines()) == 3
    sample = json.loads((run / "sft" / "samples.jsonl").read_text())          # what the policy wrote, kept
    assert sample["task"] == HGEMM and sample["outcome"] in report["samples"]["outcomes"] and "text" in sample
    assert "verified 1/3" in out.err and "sft step 3/3" in out.err        # progress as it happens
    assert "sft epoch 1/3 done: adapter saved" in out.err                 # a stopped run keeps an adapter
    assert "2 of 3 kernels verified" in out.out


def test_without_sources_the_job_says_what_to_configure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sft", f"run_dir={tmp_path}"]) == 2
    assert "sft.sources is empty" in capsys.readouterr().err


def test_rl_kernels_cache_moves_the_warm_starts_with_the_builds(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_KERNELS_CACHE", str(tmp_path / "caches"))
    assert default_cache_dir() == tmp_path / "caches" / "warm-start"
    monkeypatch.delenv("RL_KERNELS_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "rl_kernels" / "warm-start"


def test_train_before_warm_start_trains_once_and_reuses_the_adapter_for_the_same_inputs(tmp_path: Path) -> None:
    data = tmp_path / "kernels.jsonl"
    data.write_text(json.dumps({"task": HGEMM, "source": get_task(HGEMM).seeds["cpu"]}) + "\n")
    model = save_tiny_llama(tmp_path / "tiny")
    overrides = [f"policy.model={model}", "policy.max_new_tokens=8", "learner.zero_stage=0",
                 f"eval.build.cache_dir={tmp_path / 'cache'}", "sft.epochs=1", "sft.heldout_fraction=0",
                 "sft.sample_after=0", "sft.max_answer_tokens=64", f"sft.cache_dir={tmp_path / 'warm'}",
                 f'sft.sources=[{{"kind": "jsonl", "path": "{data}"}}]']
    cfg = load_config(None, overrides)
    lines: list[str] = []
    warm = cached_warm_start(cfg, lines.append)
    adapter = warm.output
    assert (adapter / "adapter_config.json").is_file() and adapter.is_relative_to(tmp_path / "warm")
    assert not warm.reused and warm.report["train_examples"] == 1
    assert start_from(cfg, warm).policy.init_adapter == adapter
    assert any("training one" in line for line in lines) and any("verified 1/1" in line for line in lines)
    lines.clear()
    again = cached_warm_start(cfg, lines.append)
    assert again.output == adapter and again.reused and again.report == warm.report
    assert lines == [f"warm start: reusing {adapter} (same model, data and settings)"]
    # An adapter without the report is an epoch of a run that stopped: it is trained again, not reused.
    (adapter.parent / "report.json").unlink()
    lines.clear()
    assert cached_warm_start(cfg, lines.append).output == adapter
    assert any("training one" in line for line in lines) and (adapter.parent / "report.json").is_file()
    # Anything the adapter depends on gives another key; where it is cached does not.
    key = warm_start_key(cfg)
    assert warm_start_key(load_config(None, [*overrides, "learner.lr=0.5"])) != key
    assert warm_start_key(load_config(None, [*overrides, f"sft.cache_dir={tmp_path}"])) == key
    data.write_text(data.read_text() + json.dumps({"task": HGEMM, "source": "// another\n"}) + "\n")
    assert warm_start_key(cfg) != key


def test_the_builtin_source_key_covers_its_backends_ladder_only(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from rl_kernels.learner import warm_start_cache

    for part in ("ladder/cpu/softmax", "ladder/cuda/softmax", "seeds/cpu", "seeds/cuda"):
        (tmp_path / part).mkdir(parents=True)
        (tmp_path / part / "a.py").write_text(part)
    monkeypatch.setattr(warm_start_cache, "LADDER_DIR", tmp_path / "ladder")
    monkeypatch.setattr(warm_start_cache, "BUILTIN_DIR", tmp_path)
    cfg = load_config(None, ["eval.backend=cpu", 'sft.sources=[{"kind":"builtin"}]'])
    key = warm_start_key(cfg)
    (tmp_path / "ladder/cuda/softmax/b.py").write_text("a new cuda rung")
    (tmp_path / "seeds/cuda/a.py").write_text("another cuda seed")
    assert warm_start_key(cfg) == key   # a cpu warm start never reads the cuda files
    (tmp_path / "ladder/cpu/softmax/b.py").write_text("a new cpu rung")
    assert warm_start_key(cfg) != key
    key = warm_start_key(cfg)
    (tmp_path / "seeds/cpu/a.py").write_text("an edited cpu seed")
    assert warm_start_key(cfg) != key


def test_full_fine_tuning_writes_a_model_that_train_loads_as_its_policy(tmp_path: Path) -> None:
    data = tmp_path / "kernels.jsonl"
    data.write_text(json.dumps({"task": HGEMM, "source": get_task(HGEMM).seeds["cpu"]}) + "\n")
    model = save_tiny_llama(tmp_path / "tiny")
    cfg = load_config(None, [f"policy.model={model}", "policy.max_new_tokens=8", "learner.zero_stage=0",
                             f"eval.build.cache_dir={tmp_path / 'cache'}", "sft.epochs=3", "sft.lr=0.001",
                             "sft.heldout_fraction=0", "sft.sample_after=1", "sft.max_answer_tokens=64",
                             "sft.full_finetune=true", f"sft.cache_dir={tmp_path / 'warm'}",
                             f'sft.sources=[{{"kind": "jsonl", "path": "{data}"}}]'])
    warm = cached_warm_start(cfg, lambda line: None)
    assert warm.output.name == "model" and warm.report["model"] == str(warm.output)
    assert warm.report["losses"][-1] < warm.report["losses"][0] and warm.report["samples"]["sampled"] == 1
    assert not (warm.output / "adapter_config.json").exists()
    tuned = AutoModelForCausalLM.from_pretrained(warm.output)      # a whole model with its tokenizer
    AutoTokenizer.from_pretrained(warm.output)
    base = AutoModelForCausalLM.from_pretrained(model)
    moved = [n for n, p in tuned.state_dict().items() if not torch.equal(p, base.state_dict()[n])]
    assert len(moved) > len(base.state_dict()) // 2                  # every weight trained, not an adapter
    started = start_from(cfg, warm)
    assert started.policy.model == str(warm.output) and started.policy.init_adapter is None


_PARENT = """
import multiprocessing, sys
from rl_kernels.config import load_config
from rl_kernels.learner.warm_start_cache import warm_start_in_child

def progress(line):
    if line.startswith("sft step"):
        print("CHILD", *(c.pid for c in multiprocessing.active_children()), flush=True)

if __name__ == "__main__":
    warm_start_in_child(load_config(None, sys.argv[1:]), progress)
"""


def test_a_killed_job_takes_its_warm_start_process_with_it(tmp_path: Path) -> None:
    """SIGKILL skips every cleanup of the parent: the stage-1 process must end on its own, not keep
    training beside the next job."""
    data = tmp_path / "kernels.jsonl"
    data.write_text(json.dumps({"task": HGEMM, "source": get_task(HGEMM).seeds["cpu"]}) + "\n")
    model = save_tiny_llama(tmp_path / "tiny")
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), f"run_dir={tmp_path / 'run'}", f"policy.model={model}", "policy.max_new_tokens=8",
         "learner.zero_stage=0", f"eval.build.cache_dir={tmp_path / 'cache'}", "sft.epochs=100000",
         "sft.heldout_fraction=0", "sft.sample_after=0", "sft.max_answer_tokens=64",
         f'sft.sources=[{{"kind": "jsonl", "path": "{data}"}}]'], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        assert line.startswith("CHILD "), line
        child = int(line.split()[1])
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert gone(child, within_s=10), "the warm-start process outlived the job that started it"
    finally:
        parent.kill()

