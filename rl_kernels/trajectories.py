"""Scored trajectories and the append-only file that keeps them, so nothing scored is lost on a crash.

A `Group` is the unit the learner trains on (G completions for one task, one policy version); a
`Trajectory` is one completion with what the policy needs to learn from it (token ids, behaviour
logprobs) and what the evaluator said about it (the `Measurement`, hence the reward).

`TrajectoryStore` writes one JSON line per record to `run_dir/trajectories.jsonl` and fsyncs each
record before returning, so a group is durable before the replay buffer counts it as accepted.
A crash can only tear the last line (a partial write); the reader skips such a line and the store
truncates it away when reopened, so the next record starts on a clean line. Any other unreadable
line is real corruption and raises: silently skipping scored data is what this file exists to avoid.

No Ray here: the replay buffer actor owns one store; tests and reports read the file directly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rl_kernels.types import Measurement

FILENAME = "trajectories.jsonl"
WEAK_TASK = "weak_task"
"""Group.extra key: True when the group's task was below the task sampler's floor as the group was made
(rl_kernels/task_sampler.py); the learner weights such a group's speed term apart."""


@dataclass
class Trajectory:
    """One completion of a group, with its score.

    `measurement` is None only when no candidate could be extracted from the completion (then
    `reward` is the failure reward and `detail` says why).
    """

    index: int
    completion: str
    source: str | None
    reward: float
    measurement: Measurement | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = ""
    truncated: bool = False
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        m = data.pop("measurement")
        return cls(**data, measurement=Measurement(**m) if m is not None else None)


@dataclass
class Group:
    """G scored completions of one prompt, all sampled with policy `policy_version` (never mixed)."""

    group_id: str
    task_id: str
    policy_version: int
    trajectories: list[Trajectory]
    backend: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)
    # The chat prompt as the generator tokenised it (shared by the group): the learner recomputes
    # logprobs of each completion after exactly these tokens.
    prompt_token_ids: list[int] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

    @property
    def made_weak(self) -> bool:
        """Whether the group's task was weak when the group was made (its `WEAK_TASK` stamp)."""
        return bool(self.extra.get(WEAK_TASK, False))

    def reward_std(self) -> float:
        """Population std of the rewards: 0 means GRPO advantages are all zero (nothing to learn)."""
        return statistics.pstdev(self.rewards) if len(self.trajectories) > 1 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "task_id": self.task_id, "policy_version": self.policy_version,
                "backend": self.backend, "extra": self.extra, "prompt_token_ids": self.prompt_token_ids,
                "trajectories": [t.to_json() for t in self.trajectories]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Group:
        return cls(group_id=data["group_id"], task_id=data["task_id"],
                   policy_version=data["policy_version"], backend=data.get("backend", "cpu"),
                   extra=data.get("extra", {}), prompt_token_ids=data.get("prompt_token_ids", []),
                   trajectories=[Trajectory.from_json(t) for t in data["trajectories"]])


class CorruptTrajectoryFile(ValueError):
    """A line other than the last one is unreadable: not a crash artifact, so never skipped."""


class TrajectoryStore:
    """Append-only JSONL, one fsync per record.

    Records are groups `{"status": ..., "group": {...}}` or the buffer's events
    `{"event": "consumed" | "dropped_stale" | "failed", "group_ids": [...], ...}`.

    Not thread-safe: one writer (the replay buffer, which serialises its calls) per file.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / FILENAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired_bytes = truncate_torn_tail(self.path)
        self._file = open(self.path, "ab")

    def append(self, record: dict[str, Any]) -> None:
        """Write one record and fsync it: when this returns, the record survives a crash."""
        line = json.dumps(record, separators=(",", ":"), allow_nan=True).encode() + b"\n"
        if b"\n" in line[:-1]:
            raise AssertionError("json.dumps produced a newline inside a record")
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())

    def append_group(self, group: Group, status: str) -> None:
        """Persist a scored group with its fate at the time ("accepted", "filtered/<reason>")."""
        self.append({"status": status, "group": group.to_json()})

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truncate_torn_tail(path: Path) -> int:
    """Cut a partial last line left by a crash mid-write; returns how many bytes were cut."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data.rfind(b"\n") + 1  # 0 when the only line is torn
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return len(data) - keep


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete record in file order; a torn last line (crash mid-write) is skipped."""
    path = Path(path)
    if path.is_dir():
        path = path / FILENAME
    if not path.exists():
        return
    lines = path.read_bytes().split(b"\n")
    # After split, a clean file ends with b"" (its trailing newline); anything else is a torn tail.
    complete, tail = lines[:-1], lines[-1]
    for number, line in enumerate(complete, start=1):
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorruptTrajectoryFile(f"{path}:{number}: unreadable record ({exc})") from None
    del tail  # a partial write: never acknowledged to anyone, so nothing is lost by skipping it


def read_groups(path: Path) -> Iterator[tuple[str, Group]]:
    """(status, group) for every persisted group record (event records are skipped)."""
    for record in read_records(path):
        if "group" in record:
            yield record["status"], Group.from_json(record["group"])
