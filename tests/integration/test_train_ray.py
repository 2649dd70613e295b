"""`rl-kernels train` end to end on a local CPU Ray cluster: generators, compile pool, timer, replay
buffer and the LoRA/DeepSpeed learner, with real builds and evaluations; nothing is mocked.

The policy is a one-layer Llama trained in the module fixture to answer with one of two texts,
uniformly: a valid kernel for builtin/scale_bias_relu (reward ~1) or an answer without code
(reward 0), so most groups have reward variance and the learner has something to train on.

What must hold: learner steps publish versions 1, 2, 3 in order, groups sampled after a
publication carry the newer version, no batch holds a group staler than max_staleness, and a run
that crashed after a step but before its checkpoint resumes from the previous checkpoint: the
lost step's groups are trained again, its version number is published again, and every group is
consumed exactly once by the steps the final weights include. The resume happens where a long run's
would: on a copy of the run directory at another path (the original gone), with the warm start the
run was started from travelling inside it and the warm-start cache empty.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
from peft import LoraConfig, get_peft_model  # noqa: E402
from test_rollout_ray import ANSWER, MAX_NEW_TOKENS, TASK  # noqa: E402
from tiny_model import save_memorizing_llama  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from rl_kernels.cluster.driver import Driver  # noqa: E402
from rl_kernels.cluster.train import SUMMARY, LearnStage  # noqa: E402
from rl_kernels.learner.publish import adapter_dir, published_versions  # noqa: E402
from rl_kernels.learner.warm_start_cache import WarmStart, place_in_run, start_from  # noqa: E402
from rl_kernels.policy.delivery import read_probe  # noqa: E402
from rl_kernels.buffer_restore import RESUMED, restore_buffer  # noqa: E402
from rl_kernels.config import Config, load_config  # noqa: E402
from rl_kernels.metrics import read_metrics  # noqa: E402
from rl_kernels.run_dir import CONFIG_FILE, load_run_config  # noqa: E402
from rl_kernels.trajectories import read_groups, read_records  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NO_CODE = "### Performance analysis\nI am not sure.\n### Code\nnothing yet\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_memorizing_llama(tmp_path_factory.mktemp("memorizing"), [ANSWER, NO_CODE])


def _config(run_dir: Path, model_dir: Path, cache_dir: Path, *overrides: str) -> Config:
    return load_config(REPO / "configs" / "local.yaml", [
        f"run_dir={run_dir}", f"policy.model={model_dir}", f"policy.max_new_tokens={MAX_NEW_TOKENS}",
        "policy.group_size=4", f"rollout.tasks=[{TASK}]", "rollout.max_groups=100", "rollout.slot_poll_s=0.1",
        "rollout.batch_groups=1", "rollout.max_staleness=1", "prompts.mode=plain",
        "learner.lr=1e-3", "learner.lora.rank=4", "train.max_steps=3", "train.checkpoint_every=2",
        "train.batch_timeout_s=1", "metrics.interval_s=1", "metrics.wandb=false",
        f"eval.build.cache_dir={cache_dir}", "eval.sandbox.timeout_s=120", "eval.timing.warmup=1",
        f"eval.timing.cpu_cache_bytes={2**20}", *overrides])


def _placed_warm_start(run_dir: Path, model_dir: Path, warm_cache: Path) -> WarmStart:
    """A warm start as `train` with sft.before_train leaves one: an adapter in the warm-start cache,
    placed inside the run directory by the real placement. Its LoRA B is zero (PEFT's
    initialisation), so merged into the base it leaves the memorised answers as they are."""
    adapter = warm_cache / "sft" / "adapter"
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"])
    get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), lora).save_pretrained(adapter)
    return place_in_run(WarmStart(adapter, {"train_examples": 0}, reused=False), run_dir)


def _files_naming(root: Path, path: Path) -> list[Path]:
    """The files under `root` whose bytes contain `path`."""
    return [f for f in root.rglob("*") if f.is_file() and str(path).encode() in f.read_bytes()]


def _consumptions(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in read_records(run_dir) if r.get("event") in ("consumed", RESUMED)]


def test_train_then_resume_after_a_lost_step(ray_cluster: Any, model_dir: Path, cache_dir: Path,
                                             tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # The session's build cache, as in the rollout tests: the precompiled torch header of the seeds'
    # flags (-O3, ~50 s) is built once per session, not again here.  Nothing below depends on
    # whether a build is a cache hit (the resumed run hits the first run's builds either way).
    run, cache, warm_cache = tmp_path / "first" / "run", cache_dir, tmp_path / "warm-start-cache"
    warm = _placed_warm_start(run, model_dir, warm_cache)
    # One held-out check, of v3, through the same graph: builtin/gelu held out, two samples. The warm
    # start is an adapter (local.yaml's is a full fine-tune), merged in as policy.init_adapter.
    cfg = start_from(_config(run, model_dir, cache, "split.heldout=[builtin/gelu]", "split.samples=2",
                             "split.eval_every_versions=3", "metrics.status_every_s=1",
                             "sft.full_finetune=false"), warm)
    first = Driver(LearnStage, cfg).run()
    # what the user read while it ran: each role's readiness, then status lines in the silences
    out = capfd.readouterr().out
    assert "ready: 1 generator (" in out and "ready: 1 learner (" in out and "ready: 2 compile workers (" in out
    assert re.search(r"^status \d+s: .*\| queues: generate \d+, compile \d+, time \d+ \| \d+ groups? done", out, re.M), out

    assert (first["steps"], first["version"]) == (3, 3)
    assert load_config(run / CONFIG_FILE).policy.init_adapter == run / "warm_start" / "adapter"
    versions = {g.group_id: g.policy_version for _, g in read_groups(run)}
    events = _consumptions(run)
    assert [e["step"] for e in events] == [1, 2, 3]
    for e in events:   # at consumption the learner was at step - 1 (= its version)
        assert all(e["step"] - 1 - versions[gid] <= 1 for gid in e["group_ids"]), (e, versions)
    assert max(versions.values()) >= 1, "no group was sampled with a published adapter"
    assert 3 in first["generators"][0]["loaded_versions"]
    assert published_versions(run) == [1, 2, 3]
    # every version was published with its probe, and the generator checked each one it sampled from
    assert all(read_probe(adapter_dir(run, v)) is not None for v in (1, 2, 3))
    gen = first["generators"][0]
    sampled = {v for v in versions.values() if v > 0}
    assert gen["adapter_checks"] >= len(sampled) >= 1 and gen["adapter_check_failures"] == 0, gen
    assert gen["adapter_unchecked"] == 0
    assert any(r.get("policy/delivery/checks", 0) >= 1 for r in read_metrics(run))
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir()) == ["step-2", "step-3"]
    learner_rows = [r for r in read_metrics(run) if "learner/loss" in r]
    assert [r["step"] for r in learner_rows] == [1, 2, 3]
    assert all(r["learner/tokens"] >= 0 and r["policy/version"] == r["step"] for r in learner_rows)
    assert json.loads((run / SUMMARY).read_text())["steps"] == 3
    checks = [json.loads(line) for line in (run / "heldout.jsonl").read_text().splitlines()]
    assert [(c["version"], c["tasks"], c["samples"]) for c in checks] == [(3, 1, 2)]
    assert [t["task_id"] for t in checks[0]["per_task"]] == ["builtin/gelu"]
    assert [h["version"] for h in first["heldout"]] == [3]
    assert [r["step"] for r in read_metrics(run) if "heldout/pass@1" in r] == [3]
    assert all(g.task_id != "builtin/gelu" for _, g in read_groups(run))   # never a training prompt

    # A crash after step 3, before its checkpoint: the newest checkpoint is step 2 (policy v2).
    shutil.rmtree(run / "checkpoints" / "step-3")
    lost = events[-1]["group_ids"]
    # The run directory travels: copied to another path, the original and the warm-start cache gone.
    # The build cache stays shared: it is content-addressed, not the run's state, and an empty one
    # would build the precompiled torch header (~50 s) again.
    moved = tmp_path / "second" / "run"
    shutil.copytree(run, moved, symlinks=True)
    shutil.rmtree(tmp_path / "first")
    shutil.rmtree(warm_cache)
    lines: list[str] = []
    resumed = load_run_config(moved, ["train.max_steps=5", "split.eval_every_versions=0"], lines.append)
    assert lines == [f"run directory moved from {run} to {moved}: re-rooted policy.init_adapter"]
    assert resumed.policy.init_adapter == moved / "warm_start" / "adapter"
    second = Driver(LearnStage, resumed, resume=True).run()

    assert second["resumed_from"]["step"] == 2 and second["resumed_from"]["version"] == 2
    assert second["resumed_from"]["requeued"] >= len(lost)
    assert (second["steps"], second["version"]) == (5, 5)
    after = _consumptions(moved)[len(events):]
    assert after[0] == {**after[0], "event": RESUMED, "step": 2, "version": 2}
    assert [e["step"] for e in after[1:]] == [3, 4, 5]
    assert after[1]["group_ids"] == lost, "the lost step's group is trained again first"
    assert published_versions(moved) == [2, 3, 4, 5]   # v3 re-published; v2 kept for checkpoint step-2
    # Replaying the whole file as of the final checkpoint: each group consumed once, none left over.
    final = restore_buffer(read_records(moved), step=5, version=5, max_staleness=1, batch_groups=1)
    assert final.requeued == [] and final.manager.stats()["consumed"] == 5
    learner_steps = [r["step"] for r in read_metrics(moved) if "learner/loss" in r]
    assert learner_steps == [1, 2, 3, 3, 4, 5]   # metrics.jsonl continues (W&B is off here)
    # The copy's checkpoints and adapters were used: step-2 resumed, new ones written beside it, the
    # generator served the versions published there; nothing wrote to or names the old place.
    assert sorted(p.name for p in (moved / "checkpoints").iterdir() if p.is_dir()) == ["step-2", "step-4", "step-5"]
    assert 5 in second["generators"][0]["loaded_versions"]
    assert not run.exists() and _files_naming(moved, run) == []
