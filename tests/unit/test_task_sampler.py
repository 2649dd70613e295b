"""The health-driven task sampler: a task whose correct rate collapses gets more groups than the plain
cycle gives it, every task keeps one group per pass, healthy tasks are cycled exactly as before, and
the health rebuilt from trajectories.jsonl is the live sampler's."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from rl_kernels.config import RolloutConfig
from rl_kernels.rollout import TaskCycle
from rl_kernels.task_sampler import TaskHealth, TaskSampler
from rl_kernels.tasks import get_task
from rl_kernels.trajectories import WEAK_TASK, Group, Trajectory, TrajectoryStore
from rl_kernels.types import Measurement

TASKS = [get_task(t) for t in ("builtin/scale_bias_relu", "builtin/rmsnorm", "builtin/softmax")]
WEAK = TASKS[0].id
CFG = RolloutConfig()   # floor 0.25, 2 groups per pass for a weak task, alpha 0.5


def _group(task_id: str, correct: int, size: int = 8, gid: str = "g", extra: dict | None = None) -> Group:
    """`correct` of `size` completions passed; the rest did not build (one without code at all)."""
    trajs = []
    for i in range(size):
        m = Measurement(task=task_id, backend="cpu", mode="module", compiled=i < correct, correct=i < correct,
                        speedup=1.0 if i < correct else None, reward=3.0 if i < correct else 0.0)
        trajs.append(Trajectory(index=i, completion="", source="x", reward=m.reward,
                                measurement=None if i == size - 1 and i >= correct else m))
    return Group(group_id=gid, task_id=task_id, policy_version=0, trajectories=trajs, extra=dict(extra or {}))


def _run(sampler: TaskSampler | TaskCycle, correct_of: dict[str, list[int]], draws: int) -> list[str]:
    """Draw `draws` tasks; each group finishes before the next draw with the next correct count of its task."""
    drawn: list[str] = []
    left = {t: list(c) for t, c in correct_of.items()}
    for i in range(draws):
        task = sampler.next()
        drawn.append(task.id)
        if isinstance(sampler, TaskSampler):
            n = left[task.id].pop(0) if len(left[task.id]) > 1 else left[task.id][0]
            sampler.observe(_group(task.id, n, gid=f"g{i}", extra=sampler.stamp(task)))
    return drawn


HEALTHY = {t.id: [6] for t in TASKS}
COLLAPSE = {**HEALTHY, WEAK: [3, 4, 1, 1, 0]}   # scale_bias_relu's run: 3/8, 4/8, then 1/8 and 0/8


def test_healthy_tasks_are_cycled_exactly_as_before() -> None:
    cycle = TaskCycle(TASKS, random.Random(7))
    plain = [cycle.next().id for _ in range(30)]
    assert _run(TaskSampler(TASKS, random.Random(7), CFG), HEALTHY, 30) == plain
    for p in range(10):
        assert sorted(plain[3 * p:3 * p + 3]) == sorted(t.id for t in TASKS)


def test_a_collapsing_task_gets_more_groups_than_under_the_cycle() -> None:
    sampler = TaskSampler(TASKS, random.Random(0), CFG)
    drawn = _run(sampler, COLLAPSE, 60)
    cycle = TaskCycle(TASKS, random.Random(0))
    plain = Counter(cycle.next().id for _ in range(60))
    assert plain[WEAK] == 20
    assert Counter(drawn)[WEAK] >= 27        # half of the groups once it is weak (2 of each pass of 4)
    assert sampler.health.weak(WEAK) and sampler.weight(WEAK) == 2
    assert [sampler.weight(t.id) for t in TASKS[1:]] == [1, 1]
    summary = sampler.summary()[WEAK]
    assert summary["groups"] == Counter(drawn)[WEAK] and 0 < summary["weak_groups"] < summary["groups"]


def test_every_task_keeps_one_group_per_pass_when_the_others_are_weak() -> None:
    # two of three tasks never pass: after the first pass (no health yet) each pass is 2 + 2 + 1 groups
    correct = {TASKS[0].id: [0], TASKS[1].id: [0], TASKS[2].id: [8]}
    drawn = _run(TaskSampler(TASKS, random.Random(3), CFG), correct, 3 + 5 * 20)
    assert sorted(drawn[:3]) == sorted(t.id for t in TASKS)
    for p in range(20):
        assert Counter(drawn[3 + 5 * p:8 + 5 * p]) == {TASKS[0].id: 2, TASKS[1].id: 2, TASKS[2].id: 1}


def test_health_is_an_exponential_mean_with_a_floor() -> None:
    health = TaskHealth([WEAK], alpha=0.5, floor=0.25)
    assert health.tasks[WEAK].rate is None and not health.weak(WEAK)   # no group yet: healthy
    for n, rate in ((4, 0.5), (1, 0.3125), (0, 0.15625)):
        health.observe(_group(WEAK, n))
        assert health.tasks[WEAK].rate == pytest.approx(rate)
    assert health.weak(WEAK)
    health.observe(_group("builtin/gelu", 0))    # not a task sampled now: ignored
    assert list(health.tasks) == [WEAK] and health.tasks[WEAK].groups == 3
    with pytest.raises(ValueError, match="at least one group per pass"):
        TaskCycle(TASKS, random.Random(0), lambda task: 0).next()


def test_health_rebuilt_from_trajectories_is_the_live_samplers(tmp_path: Path) -> None:
    live = TaskSampler(TASKS, random.Random(5), CFG)
    shares = {TASKS[0].id: [3, 1, 0, 0, 2], TASKS[1].id: [8, 5, 6], TASKS[2].id: [7, 0, 0, 0]}
    finished: list[Group] = []
    with TrajectoryStore(tmp_path) as store:
        for i in range(24):
            task = live.next()
            group = _group(task.id, shares[task.id][i % len(shares[task.id])], gid=f"g{i:03d}",
                           extra={"prompt_mode": "plain", **live.stamp(task)})
            live.observe(group)
            finished.append(group)
            store.append_group(group, "accepted" if i % 4 else "filtered/zero_variance")
            if i % 5 == 0:
                store.append({"event": "consumed", "group_ids": [group.group_id], "version": i, "step": i})
        store.append({"event": "failed", "group_ids": ["g999"], "reason": "generator_failed"})
        store.append({"event": "resumed", "step": 3, "version": 3})
    rebuilt = TaskSampler(TASKS, random.Random(11), CFG)
    assert rebuilt.restore(tmp_path / "trajectories.jsonl") == 24
    assert rebuilt.health.tasks == live.health.tasks
    assert any(r.weak_groups for r in live.health.tasks.values())
    assert rebuilt.metrics() == live.metrics() and rebuilt.summary() == live.summary()
    # the same health and the checkpointed rng: a resumed run draws what the uninterrupted one would
    uninterrupted = TaskSampler(TASKS, random.Random(11), CFG)
    for group in finished:
        uninterrupted.observe(group)
    assert [rebuilt.next().id for _ in range(12)] == [uninterrupted.next().id for _ in range(12)]


def test_metrics_name_each_task() -> None:
    sampler = TaskSampler(TASKS[:2], random.Random(0), CFG)
    sampler.observe(_group(TASKS[0].id, 0))
    assert sampler.metrics() == {f"sampler/correct_rate/{TASKS[0].id}": 0.0, f"sampler/weight/{TASKS[0].id}": 2.0,
                                 f"sampler/weight/{TASKS[1].id}": 1.0, "sampler/weak_tasks": 1.0}
    assert sampler.stamp(TASKS[0]) == {WEAK_TASK: True} and sampler.stamp(TASKS[1]) == {WEAK_TASK: False}
    assert "is weak: recent correct rate 0.00 < 0.25, 2 groups per pass" in sampler.health_line(TASKS[0].id)
