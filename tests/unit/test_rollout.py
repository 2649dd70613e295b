"""The Ray-free parts of a rollout: task order, prompt choice (contrastive, plain, recorded
fallback), completion -> trajectory, and the running tally the progress bar and summary print."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from rl_kernels.archive import KernelArchive
from rl_kernels.config import PromptConfig, RewardConfig
from rl_kernels.policy import Completion
from rl_kernels.prompts import parse_completion
from rl_kernels.evaluation.reward import training_reward
from rl_kernels.rollout import (SEED_POLICY_VERSION, Tally, TaskCycle, build_failure, group_line, make_prompt,
                                trajectory)
from rl_kernels.tasks import get_task
from rl_kernels.trajectories import Group
from rl_kernels.types import Build, Measurement

TASK = get_task("builtin/softmax")


def _measured(speedup: float, **kw: object) -> Measurement:
    fields: dict[str, object] = dict(task=TASK.id, backend="cpu", mode="kernel", compiled=True, correct=True,
                                     candidate_ms=1.0 / speedup, baseline_ms=1.0, baseline="eager",
                                     speedup=speedup, noise=0.01, reward=1.2, device="cpu")
    fields.update(kw)
    return Measurement(**fields)  # type: ignore[arg-type]


def _completion(text: str) -> Completion:
    return Completion(text=text, prompt_token_ids=[1, 2], token_ids=[5, 6, 7], logprobs=[-0.1, -0.2, -0.3],
                      adapter_version=0, finish_reason="stop", truncated=False)


ANSWER = "### Performance analysis\nx\n### Algorithm design\ny\n### Code\n```python\nprint(1)\n```\n"


def test_task_cycle_gives_every_task_once_per_pass() -> None:
    tasks = [get_task(t) for t in ("builtin/gelu", "builtin/softmax", "builtin/rmsnorm")]
    cycle = TaskCycle(tasks, random.Random(0))
    drawn = [cycle.next().id for _ in range(9)]
    for p in range(3):
        assert sorted(drawn[3 * p:3 * p + 3]) == sorted(t.id for t in tasks)
    assert Counter(drawn) == Counter({t.id: 3 for t in tasks})
    with pytest.raises(ValueError, match="no tasks"):
        TaskCycle([], random.Random(0))


def test_prompt_is_contrastive_with_archived_kernels_and_a_recorded_fallback_without(tmp_path: Path) -> None:
    cfg = PromptConfig(num_exemplars=2, num_buckets=4, tau=1.0)
    with KernelArchive(tmp_path / "archive.sqlite") as archive:
        empty = make_prompt(TASK, "cpu", archive, cfg, random.Random(0))
        assert empty.mode == "plain_fallback" and empty.exemplar_speedups == []
        for i, s in enumerate((0.5, 1.0, 2.0, 4.0)):
            archive.add(TASK.id, f"// kernel {i}\n", _measured(s), policy_version=SEED_POLICY_VERSION, backend="cpu")
        p = make_prompt(TASK, "cpu", archive, cfg, random.Random(0))
        assert p.mode == "contrastive" and len(p.exemplar_speedups) == 2
        assert p.exemplar_speedups == sorted(p.exemplar_speedups)       # slowest first
        assert all(f"{s:.2f}x" in p.messages[1]["content"] for s in p.exemplar_speedups)
        plain = make_prompt(TASK, "cpu", archive, cfg.model_copy(update={"mode": "plain"}), random.Random(0))
        assert plain.mode == "plain" and "// kernel" not in plain.messages[1]["content"]


def test_trajectory_from_parsed_and_unparsed_completions() -> None:
    good = _completion(ANSWER)
    parsed = parse_completion(good.text, TASK, "cpu")
    m = _measured(1.5, reward=1.3)
    t = trajectory(2, good, parsed, m, RewardConfig())
    assert (t.index, t.source, t.reward, t.measurement, t.token_ids, t.logprobs) == (
        2, "print(1)\n", 1.3, m, [5, 6, 7], [-0.1, -0.2, -0.3])
    bad = _completion("no code here")
    t = trajectory(0, bad, parse_completion(bad.text, TASK, "cpu"), None, RewardConfig())
    assert t.source is None and t.measurement is None and t.reward == 0.0 and t.detail == "no_code_block"


def test_build_failure_keeps_the_gate_reason() -> None:
    m = build_failure(TASK, Build(key="", ok=False, log="x" * 5000, reason="side_stream"), "cpu", "kernel", RewardConfig())
    assert (m.rejected, m.compiled, m.reward, len(m.detail)) == ("side_stream", False, 0.0, 4000)
    assert build_failure(TASK, Build(key="k", ok=False, log="err"), "cpu", "kernel", RewardConfig()).rejected == "compile_error"


def test_tally_counts_and_best_speedups() -> None:
    parsed = parse_completion(ANSWER, TASK, "cpu")
    unparsed = parse_completion("nothing", TASK, "cpu")
    trajs = [trajectory(0, _completion(ANSWER), parsed, _measured(1.5), RewardConfig()),
             trajectory(1, _completion(ANSWER), parsed, _measured(2.5), RewardConfig()),
             trajectory(2, _completion(ANSWER), parsed, Measurement(task=TASK.id, backend="cpu", mode="kernel",
                                                                     compiled=True, rejected="incorrect"), RewardConfig()),
             trajectory(3, _completion("nothing"), unparsed, None, RewardConfig())]
    tally = Tally()
    tally.add(Group("g1", TASK.id, 0, trajs, backend="cpu"), "accepted")
    s = tally.summary()
    assert (s["groups"], s["completions"], s["parsed"], s["compiled"], s["correct"]) == (1, 4, 3, 3, 2)
    assert s["best_speedup_per_task"] == {TASK.id: 2.5} and s["group_status"] == {"accepted": 1}
    assert s["rejections"] == {"incorrect": 1, "parse/no_code_block": 1}
    assert tally.postfix()["best"] == "2.50x"
    assert group_line(Group("g000007-ab", TASK.id, 3, trajs, backend="cpu"), "accepted", 212.4) == (
        "group g000007 builtin/softmax v3: 4 completions, 3 compiled, 2 correct (2.50x 1.50x), accepted, 212 s")


def test_reward_shaping_is_opt_in_and_never_pays_a_hack() -> None:
    cfg = RewardConfig(format_reward=0.01, compile_reward=0.02)
    def m(**kw: object) -> Measurement:
        return Measurement(task=TASK.id, backend="cpu", mode="kernel", **kw)
    assert training_reward(None, cfg) == 0.0                                   # no code at all
    assert training_reward(m(rejected="compile_error"), cfg) == 0.01           # code, did not build
    assert training_reward(m(compiled=True, rejected="incorrect"), cfg) == 0.02
    assert training_reward(m(compiled=True, rejected="side_stream"), cfg) == 0.0   # a hack: nothing
    assert training_reward(m(compiled=True, correct=True, reward=1.2), cfg) == 1.2
    assert training_reward(m(compiled=True, rejected="incorrect"), RewardConfig()) == 0.0   # off by default
    with pytest.raises(ValueError, match="format_reward <= compile_reward < min_correct_reward"):
        RewardConfig(format_reward=0.02, compile_reward=0.01)
