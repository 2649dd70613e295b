"""The end-of-job summary of `rl-kernels train`: it names where stage 3 started and, when the job
ran the warm start too, stage 1's compile / correct rates."""

from __future__ import annotations

from pathlib import Path

from rl_kernels.cli import _train_summary, _warm_start_line

SUMMARY = {
    "steps": 4, "version": 4, "groups": 6, "wall_s": 1191.0, "steps_per_hour": 12.1, "learner_idle_ratio": 0.36,
    "resumed_from": None, "reward_trend": {"first_steps_reward": 1.169, "last_steps_reward": 1.467},
    "parsed": 24, "compiled": 20, "correct": 19, "completions": 24,
    "best_speedup_per_task": {"builtin/rmsnorm": 7.82}, "run_dir": "runs/r",
    "archive": [{"task_id": "builtin/rmsnorm", "count": 3, "best_speedup": 7.82, "best_policy_version": 1}],
}
REPORT = {"train_examples": 9, "losses": [0.794, 0.2, 0.057],
          "samples": {"sampled": 3, "compile_rate": 1.0, "correct_rate": 2 / 3}}


def test_the_summary_names_the_start_and_the_warm_start_line_its_rates() -> None:
    text = _train_summary(SUMMARY, Path("runs/r/report/report.html"), "from the warm start /c/sft/model")
    assert "stage: GRPO (stage 3) from the warm start /c/sft/model" in text
    assert "compiled 20, correct 19 of 24" in text and "builtin/rmsnorm 7.82x" in text
    line = _warm_start_line(REPORT, Path("/c/sft/model"), reused=True)
    assert line == ("stage 1 (warm start, reused): 9 verified examples, loss 0.794 -> 0.057; after it its samples "
                    "100% compiled, 67% correct (3 sampled); /c/sft/model")
    unsampled = _warm_start_line({**REPORT, "samples": None}, Path("/c/a"), reused=False)
    assert "not sampled (sft.sample_after=0)" in unsampled and "reused" not in unsampled
