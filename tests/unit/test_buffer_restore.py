"""Rebuilding the replay buffer of a resumed run from trajectories.jsonl: consumptions by steps the
checkpoint does not include come back, nothing is duplicated, and an earlier resume is honoured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rl_kernels.buffer_restore import RESUMED, restore_buffer
from rl_kernels.trajectories import Group, Trajectory, TrajectoryStore, read_records


def _group(gid: str, version: int) -> Group:
    return Group(group_id=gid, task_id="t", policy_version=version, prompt_token_ids=[1],
                 trajectories=[Trajectory(index=i, completion="", source=None, reward=float(i)) for i in range(2)])


def _write(path: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with TrajectoryStore(path) as store:
        for r in records:
            store.append(r)
    return list(read_records(path))


def _accepted(gid: str, version: int) -> dict[str, Any]:
    return {"status": "accepted", "group": _group(gid, version).to_json()}


def test_steps_after_the_checkpoint_give_their_groups_back(tmp_path: Path) -> None:
    records = _write(tmp_path, [
        _accepted("a", 0), _accepted("b", 0), {"status": "filtered/zero_variance", "group": _group("z", 0).to_json()},
        {"event": "consumed", "group_ids": ["a"], "version": 0, "step": 1},
        {"event": "failed", "group_ids": ["f"], "reason": "generator_failed"},
        _accepted("c", 1),
        {"event": "consumed", "group_ids": ["b"], "version": 1, "step": 2},   # step 2: after the checkpoint
        _accepted("d", 2),
    ])
    restored = restore_buffer(records, step=1, version=1, max_staleness=2, batch_groups=1)
    assert list(restored.waiting) == ["b", "c", "d"]       # acceptance order, b re-queued
    assert restored.requeued == ["b"]
    stats = restored.manager.stats()
    assert (stats["submitted"], stats["accepted"], stats["consumed"], stats["buffered"]) == (6, 4, 1, 3)
    assert (stats["filtered/zero_variance"], stats["failed/generator_failed"], stats["version"]) == (1, 1, 1)
    assert restored.manager.capacity() == 0   # (2 + 1 + 1) * 1 - 4: producers wait for the learner
    # group d was sampled with v2, which the restored run has not published (yet): still admissible
    restored.manager.on_consumed(["b", "c", "d"])


def test_an_earlier_resume_is_replayed_in_order(tmp_path: Path) -> None:
    records = _write(tmp_path, [
        _accepted("a", 0), _accepted("b", 0),
        {"event": "consumed", "group_ids": ["a"], "version": 0, "step": 1},
        {"event": "consumed", "group_ids": ["b"], "version": 1, "step": 2},
        {"event": RESUMED, "step": 1, "version": 1},          # step 2 was lost: b is back
        {"event": "consumed", "group_ids": ["b"], "version": 1, "step": 2},   # ...and trained again
        _accepted("c", 2),
        {"event": "dropped_stale", "group_ids": ["c"], "version": 9},
    ])
    restored = restore_buffer(records, step=2, version=2, max_staleness=1, batch_groups=1)
    assert list(restored.waiting) == ["c"]          # dropped at v9, a version the checkpoint never saw
    assert restored.requeued == ["c"]
    assert restored.manager.stats()["consumed"] == 2


def test_search_mode_files_cannot_be_resumed_as_training(tmp_path: Path) -> None:
    records = _write(tmp_path, [_accepted("a", 0), {"event": "consumed", "group_ids": ["a"], "version": 0}])
    with pytest.raises(ValueError, match="search mode"):
        restore_buffer(records, step=0, version=0, max_staleness=1, batch_groups=1)
