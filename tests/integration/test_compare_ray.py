"""`rl-kernels compare` end to end on a local CPU Ray cluster: the generator, compile pool and timer of
the real pipeline sample and measure two policy versions of a run directory; nothing is mocked.

The run directory is made the cheap way, without training: the config.yaml a run writes, an archive
holding the task's seed as the run's start measured it, and version 1 published as learner/publish.py
lays it out (a PEFT LoRA adapter in adapters/policy-v1). The adapter's B is zero, as a fresh LoRA's
is, so version 1 samples exactly what version 0 does when both get the same prompt and seed: the
comparison must then find the same outcomes in both, which is what "same prompts, same seeds" means.
The policy is test_rollout_ray's memorizing Llama (its answer: a correct kernel), so both versions
have correct kernels and the ratio is defined. Each version's repeats of that kernel are timed once
(compare.measure_each=false): two evaluations in all, ~7 s each on an idle 2-core machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
from test_rollout_ray import ANSWER, MAX_NEW_TOKENS, TASK  # noqa: E402
from tiny_model import save_memorizing_llama  # noqa: E402

from rl_kernels.archive import KernelArchive  # noqa: E402
from rl_kernels.cli import main  # noqa: E402
from rl_kernels.config import dump_config, load_config  # noqa: E402
from rl_kernels.learner.publish import adapter_dir, publish_adapter  # noqa: E402
from rl_kernels.rollout import SEED_POLICY_VERSION  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402
from rl_kernels.types import Measurement  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SEED_SPEEDUP = 0.91   # what the run's start "measured" for the seed: the contrastive prompt shows it


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_memorizing_llama(tmp_path_factory.mktemp("memorizing"), ANSWER)


def _run_dir(root: Path, model_dir: Path, cache_dir: Path) -> Path:
    """config.yaml, archive.sqlite with the seed, adapters/policy-v1: what `compare` reads of a run."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    run = root / "run"
    cfg = load_config(REPO / "configs" / "local.yaml", [
        f"run_dir={run}", f"policy.model={model_dir}", f"policy.max_new_tokens={MAX_NEW_TOKENS}",
        f"rollout.tasks=[{TASK}]", "metrics.wandb=false", f"eval.build.cache_dir={cache_dir}",
        "eval.sandbox.timeout_s=120", "eval.timing.warmup=1", f"eval.timing.cpu_cache_bytes={2**20}",
        "metrics.status_every_s=5", "sft.before_train=false", "compare.measure_each=false",
        # This test is the comparison's plumbing, not the evaluator's trust in a speed: on a loaded 2-core
        # host a cpu timing can spread, drift or read past the ceiling, and a speed not believed has no
        # geomean (so no ratio). The flags are lifted so the figures always exist.
        "eval.reward.max_spread={cpu: 1.0e9}", "eval.reward.baseline_drift={cpu: 1.0e9}",
        "eval.reward.speedup_ceiling=1.0e9"])
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(cfg))
    task = get_task(TASK)
    seed = Measurement(task=TASK, backend="cpu", mode="kernel", compiled=True, correct=True, speedup=SEED_SPEEDUP,
                       baseline="eager", baseline_ms=1.0, candidate_ms=1.0 / SEED_SPEEDUP, reward=1.0)
    with KernelArchive(run / "archive.sqlite") as archive:
        archive.add(TASK, task.seeds["cpu"], seed, policy_version=SEED_POLICY_VERSION, backend="cpu")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                               LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))   # B = 0
    publish_adapter(model.save_pretrained, run, 1)
    return run


@pytest.mark.slow   # ~100 s on 2 cores; the figures' statistics are unit-tested (test_comparison.py)
def test_compare_samples_both_versions_alike_and_writes_the_figures(
        ray_cluster: Any, model_dir: Path, cache_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    run = _run_dir(tmp_path, model_dir, cache_dir)
    assert main(["compare", str(run), "--samples", "2"]) == 0
    out = capfd.readouterr().out
    print(out)   # the command's output, for the record (pytest -s)
    assert f"compare v0 vs v1 of {run}: 1 training task(s) ({TASK}) x 2 completions per version" in out
    assert f"compare {TASK} v0: 2 completions" in out and f"compare {TASK} v1: 2 completions" in out
    assert "v1 / v0 pooled geomean vs eager " in out

    s = json.loads((run / "compare" / "v0-v1.json").read_text())
    assert (run / "compare" / "v0-v1.md").read_text().count(f"| {TASK} | v") == 2
    assert s["versions"] == [0, 1] and s["tasks"] == [TASK] and s["samples"] == 2 and s["baselines"] == ["eager"]
    assert s["adapters"] == {"0": None, "1": str(adapter_dir(run, 1))}
    assert s["prompts"][TASK] == {"mode": "contrastive", "seed_speedup": pytest.approx(SEED_SPEEDUP),
                                  "seed_from": "archive"}
    cells = {c["version"]: c for c in s["cells"]}
    assert [cells[v]["completions"] for v in (0, 1)] == [2, 2]
    assert len(s["outcomes"]) == 4
    assert sorted((o["version"], o["index"]) for o in s["outcomes"]) == [(v, i) for v in (0, 1) for i in range(2)]
    # the same prompt and seed through a zero adapter: the same completions in both versions
    kernels = {v: [o["kernel"] for o in s["outcomes"] if o["version"] == v] for v in (0, 1)}
    assert kernels[0] == kernels[1] and None not in kernels[0], kernels
    assert cells[0]["correct"] >= 1 and cells[1]["correct"] >= 1, s["cells"]
    # each correct completion carries its kernel's speedup (repeats share their kernel's measurement)
    assert all(set(o["speedups"]) == {"eager"} for o in s["outcomes"] if o["reason"] == "correct")
    (ratio,) = s["ratios"]
    # The point and the replicates are the same means summed in another order: a degenerate interval (every
    # resample alike) equals the point only to rounding.
    assert ratio["tasks"] == [TASK] and ratio["value"] > 0
    assert ratio["low"] <= ratio["value"] * (1 + 1e-12) and ratio["value"] <= ratio["high"] * (1 + 1e-12), ratio
    assert s["collapsed"] == []
    # nothing archived, nothing trained on, nothing left behind
    assert not (run / "trajectories.jsonl").exists()
    with KernelArchive(run / "archive.sqlite") as archive:
        assert archive.count() == 1
    assert sorted(p.name for p in (run / "compare").iterdir()) == ["v0-v1.json", "v0-v1.md"]
