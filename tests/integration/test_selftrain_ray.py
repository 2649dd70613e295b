"""`rl-kernels selftrain` on a local CPU Ray cluster: two rounds through the real generators,
compile pool and timer, the verified samples fine-tuned on with the real LoRA/DeepSpeed trainer,
the adapter published and sampled by the next round.  Plus the keep rule on scored samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
from test_rollout_ray import ANSWER, MAX_NEW_TOKENS, TASK  # noqa: E402
from tiny_model import save_memorizing_llama  # noqa: E402

from rl_kernels.cluster.driver import Driver, RunDirError  # noqa: E402
from rl_kernels.cluster.selftrain import SUMMARY, RoundsStage, round_examples  # noqa: E402
from rl_kernels.learner.publish import published_versions  # noqa: E402
from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.metrics import read_metrics  # noqa: E402
from rl_kernels.trajectories import Group, Trajectory, read_groups  # noqa: E402
from rl_kernels.types import Measurement  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _t(i: int, text: str, *, compiled: bool, correct: bool) -> Trajectory:
    m = Measurement(task=TASK, backend="cpu", mode="kernel", compiled=compiled, correct=correct)
    return Trajectory(index=i, completion=text, source="code", reward=float(correct), measurement=m,
                      token_ids=[10 + i, 11 + i, 2])


def test_the_keep_rule_takes_verified_samples_once_each_with_the_tokens_the_policy_sampled() -> None:
    g = Group(group_id="g", task_id=TASK, policy_version=0, backend="cpu", prompt_token_ids=[1, 5, 6], trajectories=[
        _t(0, "a", compiled=True, correct=True), _t(1, "a", compiled=True, correct=True),
        _t(2, "b", compiled=True, correct=False), _t(3, "c", compiled=False, correct=False),
        Trajectory(index=4, completion="no code", source=None, reward=0.0, detail="no_code_block")])
    correct = round_examples([g], "correct", dedupe=True, max_answer_tokens=2)
    assert [(e.prompt_ids, e.answer_ids) for e in correct] == [([1, 5, 6], [10, 11])]   # cut to 2 tokens
    assert len(round_examples([g], "correct", dedupe=False, max_answer_tokens=64)) == 2
    assert [e.answer_ids for e in round_examples([g], "compiled", dedupe=True, max_answer_tokens=64)] == \
        [[10, 11, 2], [12, 13, 2]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_memorizing_llama(tmp_path_factory.mktemp("memorizing"), ANSWER)


def test_two_rounds_sample_keep_train_publish_and_sample_the_new_version_then_a_resume_adds_a_third(
        ray_cluster: Any, model_dir: Path, cache_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = load_config(REPO / "configs" / "local.yaml", [
        f"run_dir={run}", f"policy.model={model_dir}", f"policy.max_new_tokens={MAX_NEW_TOKENS}",
        "policy.group_size=3", f"rollout.tasks=[{TASK}]", "rollout.slot_poll_s=0.1", "prompts.mode=plain",
        "selftrain.rounds=2", "selftrain.groups_per_task=1", "learner.lr=1e-3", "learner.lora.rank=4",
        "metrics.interval_s=1", "metrics.wandb=false", f"eval.build.cache_dir={cache_dir}",
        "eval.sandbox.timeout_s=120", "eval.timing.warmup=1", f"eval.timing.cpu_cache_bytes={2**20}"])
    summary = Driver(RoundsStage, cfg, progress=False).run()

    groups = [g for _, g in read_groups(run)]
    assert [g.policy_version for g in groups] == [0, 1]            # round 2 sampled the published v1
    first, second = summary["rounds"]
    assert first["selftrain/sampled_version"] == 0 and second["selftrain/sampled_version"] == 1
    assert first["selftrain/correct"] == 3 and first["selftrain/kept"] == 1   # three copies of one verified answer
    assert first["selftrain/sft_steps"] == 1 and first["selftrain/loss"] > 0
    assert summary["version"] == 2 and published_versions(run) == [1, 2]
    assert [r["selftrain/round"] for r in read_metrics(run) if "selftrain/round" in r] == [1, 2]
    assert json.loads((run / SUMMARY).read_text())["version"] == 2
    assert summary["archive"] and summary["archive"][0]["task_id"] == TASK     # verified kernels archived

    # --resume with one more round: continues the committed rounds' trainer and version, loses nothing.
    resumed = Driver(RoundsStage, cfg.model_copy(update={"selftrain": cfg.selftrain.model_copy(update={"rounds": 3})}),
                              resume=True, progress=False)
    again = resumed.run()
    assert [r["selftrain/round"] for r in again["rounds"]] == [1, 2, 3]
    assert again["rounds"][2]["selftrain/sampled_version"] == 2 and again["version"] == 3
    assert [g.policy_version for _, g in read_groups(run)] == [0, 1, 2]
    assert resumed.stage.trainer is not None and resumed.stage.trainer.pe.optimizer_steps == 3   # 2 restored + 1
    assert published_versions(run) == [1, 2, 3]
    # Nothing left to do: a second resume with the same round count samples nothing.
    done = Driver(RoundsStage, cfg.model_copy(update={"selftrain": cfg.selftrain.model_copy(update={"rounds": 3})}),
                           resume=True, progress=False).run()
    assert len(done["rounds"]) == 3 and len(list(read_groups(run))) == 3
    # Without --resume the run directory is refused, not overwritten.
    with pytest.raises(RunDirError, match="pass --resume"):
        Driver(RoundsStage, cfg, progress=False)
