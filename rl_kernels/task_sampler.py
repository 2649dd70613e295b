"""Which training task the next group is for: every task in turn, and more turns for a task that is
losing its correct programs.

One LoRA serves every task, so the updates that one task's groups drive move every task's programs.
A task whose groups all fail gives GRPO no signal (every reward equal), and nothing in the objective
pulls it back while the other tasks' groups keep moving the policy: its correct programs can vanish.
So each task's recent correct rate is kept (`TaskHealth`), and a task below
`rollout.weak_task_floor` is weak: it gets `rollout.weak_task_groups` groups per pass of the cycle
instead of one, more chances of a group with a correct kernel, the only thing that teaches it again.
Every task keeps at least one group per pass, so no task is starved, and while every task is healthy
each pass is exactly the plain cycle (`TaskCycle`). Each group is stamped with whether its task was
weak when it was made (`WEAK_TASK` in `Group.extra`): the learner's guard reads it
(`grpo.weak_task_speed_weight`, learner/batch.py), and it is persisted with the group.

The health is a pure function of the scored groups in the order they finished, which is the order
trajectories.jsonl holds them (each group is persisted before its producer hears back, and only the
order within one task counts, whose groups finish minutes apart). So a resumed run rebuilds it from
that file (`TaskSampler.restore`), as the buffer is rebuilt, and with the driver's rng restored
from the checkpoint it samples as the uninterrupted run would.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_kernels.config import RolloutConfig
from rl_kernels.rollout import TaskCycle
from rl_kernels.trajectories import WEAK_TASK, Group, read_groups
from rl_kernels.types import Task


def correct_share(group: Group) -> float:
    """The share of the group's completions whose kernel passed correctness (no code counts as wrong)."""
    ms = [t.measurement for t in group.trajectories]
    return sum(1 for m in ms if m is not None and m.correct) / max(len(ms), 1)


@dataclass
class TaskRecord:
    """One task's health: the recent correct rate (None before its first group) and its counts."""

    rate: float | None = None
    groups: int = 0            # scored groups seen
    weak_groups: int = 0       # of those, made while the task was weak


class TaskHealth:
    """Per task, an exponentially weighted mean of its groups' correct shares, the newest weighted
    `alpha`: recent enough to see a collapse within a few groups, smooth enough that one unlucky group
    of 8 does not flip it. A task is weak once that rate is below `floor` (never before its first group)."""

    def __init__(self, task_ids: Iterable[str], alpha: float, floor: float) -> None:
        self.alpha, self.floor = alpha, floor
        self.tasks: dict[str, TaskRecord] = {t: TaskRecord() for t in task_ids}

    def observe(self, group: Group) -> None:
        """Fold in a scored group; a group of a task not sampled now (an earlier run's list) is ignored."""
        record = self.tasks.get(group.task_id)
        if record is None:
            return
        share = correct_share(group)
        record.rate = share if record.rate is None else record.rate + self.alpha * (share - record.rate)
        record.groups += 1
        record.weak_groups += group.made_weak

    def weak(self, task_id: str) -> bool:
        rate = self.tasks[task_id].rate
        return rate is not None and rate < self.floor


class TaskSampler:
    """The task cycle of a training run, driven by the tasks' health (see the module docstring)."""

    def __init__(self, tasks: list[Task], rng: random.Random, cfg: RolloutConfig) -> None:
        self.health = TaskHealth((t.id for t in tasks), cfg.task_health_alpha, cfg.weak_task_floor)
        self.weak_task_groups = cfg.weak_task_groups
        self._cycle = TaskCycle(tasks, rng, lambda task: self.weight(task.id))

    def next(self) -> Task:
        return self._cycle.next()

    def observe(self, group: Group) -> None:
        """A group finished scoring (accepted or filtered: its correct share counts either way)."""
        self.health.observe(group)

    def restore(self, path: Path) -> int:
        """Observe every scored group of a run's trajectories.jsonl in file order (the order they
        finished), so a resumed run starts with the health the interrupted one had; returns how many."""
        n = 0
        for _status, group in read_groups(path):
            self.observe(group)
            n += 1
        return n

    def weight(self, task_id: str) -> int:
        """Groups per pass the task gets now."""
        return self.weak_task_groups if self.health.weak(task_id) else 1

    def stamp(self, task: Task) -> dict[str, Any]:
        """What a group of `task` carries in `Group.extra` when it is made."""
        return {WEAK_TASK: self.health.weak(task.id)}

    def health_line(self, task_id: str) -> str:
        """The console line when a task turns weak or healthy again."""
        rate, floor = self.health.tasks[task_id].rate, self.health.floor
        if self.health.weak(task_id):
            return (f"task {task_id} is weak: recent correct rate {rate:.2f} < {floor:.2f}, "
                    f"{self.weight(task_id)} groups per pass")
        return f"task {task_id} is healthy again: recent correct rate {rate:.2f} >= {floor:.2f}"

    def metrics(self) -> dict[str, float]:
        """Per task its recent correct rate (once it has one) and groups per pass; the weak count."""
        out: dict[str, float] = {}
        for task_id, record in self.health.tasks.items():
            if record.rate is not None:
                out[f"sampler/correct_rate/{task_id}"] = record.rate
            out[f"sampler/weight/{task_id}"] = float(self.weight(task_id))
        out["sampler/weak_tasks"] = float(sum(self.health.weak(t) for t in self.health.tasks))
        return out

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per task: scored groups over the run, how many were made while it was weak, its recent
        correct rate and groups per pass at the end: which task was weak and what the sampler did."""
        return {task_id: {"groups": r.groups, "weak_groups": r.weak_groups, "correct_rate": r.rate,
                          "weight": self.weight(task_id)}
                for task_id, r in self.health.tasks.items()}
