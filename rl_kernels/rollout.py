"""The parts of producing a scored group that need no Ray: task order, prompts, trajectories.

The producer (`cluster/producer.py`) moves work between actors; everything it decides about *content*
is here, so it is tested without a cluster: which task comes next, which archived kernels a prompt
shows, how a completion becomes a trajectory (parsed, or rejected with a reason code), and the
running tallies the progress bar and the summary print.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rl_kernels.archive import KernelArchive, passed_every_gate
from rl_kernels.config import Backend, PromptConfig, RewardConfig
from rl_kernels.evaluation.reward import measurement_reward, training_reward
from rl_kernels.policy import Completion, Messages
from rl_kernels.prompts import Exemplar, ParsedAnswer, build_prompt
from rl_kernels.trajectories import Group, Trajectory
from rl_kernels.types import Build, Measurement, Task

SEED_POLICY_VERSION = -1
"""Archive provenance of a task's seed kernel: measured before any policy wrote anything."""


class TaskCycle:
    """Tasks in a fresh random order each pass, each task `repeats(task)` times per pass. Once by
    default, so that over a run every task gets the same number of groups (within one) and no task is
    starved by an unlucky draw; repeating a task gives it more groups while every other task still
    gets one per pass. `repeats` is read as each pass starts."""

    def __init__(self, tasks: list[Task], rng: random.Random,
                 repeats: Callable[[Task], int] = lambda task: 1) -> None:
        if not tasks:
            raise ValueError("no tasks to roll out: the suite (or rollout.tasks) is empty")
        self._tasks = list(tasks)
        self._rng = rng
        self._repeats = repeats
        self._queue: list[Task] = []

    def next(self) -> Task:
        if not self._queue:
            one_pass = self._pass()
            self._queue = self._rng.sample(one_pass, k=len(one_pass))
        return self._queue.pop()

    def _pass(self) -> list[Task]:
        counts = [(t, self._repeats(t)) for t in self._tasks]
        short = [t.id for t, n in counts if n < 1]
        if short:
            raise ValueError(f"every task needs at least one group per pass; repeats < 1 for {short}")
        return [t for t, n in counts for _ in range(n)]


@dataclass(frozen=True)
class Prompt:
    messages: Messages
    mode: str              # the mode actually used: "contrastive", "plain", or "plain_fallback"
    exemplar_speedups: list[float]


def make_prompt(task: Task, backend: Backend, archive: KernelArchive, cfg: PromptConfig,
                rng: random.Random) -> Prompt:
    """A Contrastive-RL prompt with exemplars drawn from the task's archived kernels.

    A task with nothing archived yet (no seed measured, or its seed failed) gets a plain prompt; the
    fallback is recorded in the group (`prompt_mode`), never silent, so an ablation can tell.
    """
    if cfg.mode == "plain" or cfg.num_exemplars == 0:
        return Prompt(build_prompt(task, backend, [], mode="plain"), "plain", [])
    n = min(cfg.num_exemplars, cfg.num_buckets)
    kernels = archive.sample_exemplars(task.id, backend, n, rng, num_buckets=cfg.num_buckets, tau=cfg.tau)
    if not kernels:
        return Prompt(build_prompt(task, backend, [], mode="plain"), "plain_fallback", [])
    exemplars = [Exemplar(k.source, k.speedup) for k in kernels]
    return Prompt(build_prompt(task, backend, exemplars, mode="contrastive"),
                  "contrastive", [k.speedup for k in kernels])


def build_failure(task: Task, build: Build, backend: str, mode: str, cfg: RewardConfig) -> Measurement:
    """The measurement of a candidate that never reached a timer (static gate or build failed)."""
    m = Measurement(task=task.id, backend=backend, mode=mode, compiled=False,
                    rejected=build.reason or "compile_error", detail=build.log[-4000:], build_seconds=build.seconds)
    m.reward = measurement_reward(m, cfg)
    return m


def trajectory(index: int, completion: Completion, parsed: ParsedAnswer, measurement: Measurement | None,
               reward_cfg: RewardConfig) -> Trajectory:
    """One scored completion. `measurement` is None exactly when no code could be extracted; then
    the parser's reason code goes to `detail` (the key `group_metrics` reports it under)."""
    reward = training_reward(measurement, reward_cfg)
    if measurement is None:
        assert parsed.reason is not None
        detail = parsed.reason
    else:
        detail = ""
    return Trajectory(index=index, completion=completion.text, source=parsed.code, reward=reward,
                      measurement=measurement, token_ids=list(completion.token_ids),
                      logprobs=list(completion.logprobs), finish_reason=completion.finish_reason,
                      truncated=completion.truncated, detail=detail)


def group_line(group: Group, status: str, seconds: float) -> str:
    """One console line per finished group, so a run whose first learner step is minutes away
    shows what it is doing: task, version, how many completions compiled and passed, their speedups."""
    ms = [t.measurement for t in group.trajectories]
    compiled = sum(1 for m in ms if m is not None and m.compiled)
    correct = sorted((m.speedup for m in ms if m is not None and m.correct and m.speedup is not None), reverse=True)
    speeds = " ".join(f"{x:.2f}x" for x in correct) or "-"
    return (f"group {group.group_id[:7]} {group.task_id} v{group.policy_version}: {len(ms)} completions, "
            f"{compiled} compiled, {len(correct)} correct ({speeds}), {status}, {seconds:.0f} s")


@dataclass
class Tally:
    """Running counts for the progress bar and the final summary."""

    groups: int = 0
    completions: int = 0
    parsed: int = 0
    compiled: int = 0
    correct: int = 0
    best: dict[str, float] = field(default_factory=dict)   # task id -> best believed speedup
    statuses: dict[str, int] = field(default_factory=dict)
    rejections: dict[str, int] = field(default_factory=dict)

    def add(self, group: Group, status: str) -> None:
        self.groups += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        for t in group.trajectories:
            self.completions += 1
            self.parsed += t.source is not None
            m = t.measurement
            if m is None:
                key = f"parse/{t.detail}"
            else:
                self.compiled += m.compiled
                self.correct += m.correct
                key = m.rejected or ""
                if passed_every_gate(m):
                    self.best[group.task_id] = max(self.best.get(group.task_id, 0.0), m.speedup)
            if key:
                self.rejections[key] = self.rejections.get(key, 0) + 1

    def best_speedup(self) -> float | None:
        return max(self.best.values()) if self.best else None

    def postfix(self) -> dict[str, Any]:
        best = self.best_speedup()
        return {"gen": self.completions, "compiled": self.compiled, "correct": self.correct,
                "best": f"{best:.2f}x" if best is not None else "-"}

    def summary(self) -> dict[str, Any]:
        speedups = list(self.best.values())
        return {"groups": self.groups, "completions": self.completions, "parsed": self.parsed,
                "compiled": self.compiled, "correct": self.correct, "group_status": dict(self.statuses),
                "rejections": dict(sorted(self.rejections.items(), key=lambda kv: -kv[1])),
                "best_speedup_per_task": dict(sorted(self.best.items())),
                "median_best_speedup": statistics.median(speedups) if speedups else None}
