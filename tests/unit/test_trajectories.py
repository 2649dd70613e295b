"""The trajectory file: round trip, fsync-per-record durability, and recovery from a torn last line."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from rl_kernels.trajectories import (FILENAME, CorruptTrajectoryFile, Group, Trajectory, TrajectoryStore,
                                     read_groups, read_records)
from rl_kernels.types import Measurement


def _group(gid: str, rewards: list[float], version: int = 0) -> Group:
    trajs = []
    for i, r in enumerate(rewards):
        m = Measurement(task="hgemm/fp32/128_128_128", backend="cpu", mode="kernel", compiled=True,
                        correct=r > 0, speedup=1.0 + r if r > 0 else None, reward=r,
                        rejected=None if r > 0 else "crash", extra={"noise_floor": 0.01})
        trajs.append(Trajectory(index=i, completion=f"answer {i}\n```cpp\nint x;\n```", source="int x;",
                                reward=r, measurement=m, token_ids=[1, 2, 3], logprobs=[-0.5, -1.0, -0.1],
                                finish_reason="stop"))
    return Group(group_id=gid, task_id="hgemm/fp32/128_128_128", policy_version=version, trajectories=trajs,
                 prompt_token_ids=[7, 8, 9, 10])


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    g = _group("g0", [0.0, 0.7])
    g.trajectories.append(Trajectory(index=2, completion="no code", source=None, reward=0.0,
                                     detail="malformed", truncated=True, finish_reason="length"))
    with TrajectoryStore(tmp_path) as store:
        store.append_group(g, "accepted")
        store.append({"event": "consumed", "group_ids": ["g0"], "version": 0})
    [(status, back)] = list(read_groups(tmp_path))
    assert status == "accepted" and back == g
    assert back.trajectories[1].measurement.extra == {"noise_floor": 0.01}
    assert [r.get("event") for r in read_records(tmp_path / FILENAME)] == [None, "consumed"]


def test_non_finite_speedup_survives(tmp_path: Path) -> None:
    g = _group("g0", [0.5])
    g.trajectories[0].measurement.speedup = math.inf
    with TrajectoryStore(tmp_path) as store:
        store.append_group(g, "accepted")
    [(_, back)] = list(read_groups(tmp_path))
    assert back.trajectories[0].measurement.speedup == math.inf


def test_reward_std_zero_for_identical_rewards() -> None:
    assert _group("a", [0.0, 0.0]).reward_std() == 0.0
    assert _group("b", [0.0, 0.3]).reward_std() > 0.0
    assert _group("c", [0.3]).reward_std() == 0.0


def test_each_append_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    with TrajectoryStore(tmp_path) as store:
        for i in range(3):
            store.append_group(_group(f"g{i}", [0.1, 0.2]), "accepted")
            assert len(synced) == i + 1
            # durable and readable by another reader right away, before close
            assert len(list(read_groups(tmp_path))) == i + 1


def test_torn_last_line_is_skipped_then_repaired(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path) as store:
        store.append_group(_group("g0", [0.1, 0.2]), "accepted")
        store.append_group(_group("g1", [0.3, 0.2]), "accepted")
    path = tmp_path / FILENAME
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 40])  # crash in the middle of writing g1
    assert [g.group_id for _, g in read_groups(tmp_path)] == ["g0"]
    with TrajectoryStore(tmp_path) as store:  # reopening cuts the torn tail, then appends cleanly
        assert store.repaired_bytes > 0
        store.append_group(_group("g2", [0.0, 0.5]), "filtered/zero_variance")
    assert [(s, g.group_id) for s, g in read_groups(tmp_path)] == [("accepted", "g0"), ("filtered/zero_variance", "g2")]
    assert path.read_bytes().endswith(b"\n")


def test_only_line_torn(tmp_path: Path) -> None:
    (tmp_path / FILENAME).write_bytes(b'{"status": "acc')
    assert list(read_records(tmp_path)) == []
    with TrajectoryStore(tmp_path) as store:
        assert store.repaired_bytes == len(b'{"status": "acc')
    assert (tmp_path / FILENAME).read_bytes() == b""


def test_corruption_before_the_last_line_raises(tmp_path: Path) -> None:
    good = json.dumps({"event": "consumed", "group_ids": [], "version": 0})
    (tmp_path / FILENAME).write_text(f"{good}\nnot json\n{good}\n")
    with pytest.raises(CorruptTrajectoryFile, match=":2:"):
        list(read_records(tmp_path))


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    assert list(read_records(tmp_path)) == []


def test_group_pickles_for_the_object_store() -> None:
    import pickle

    g = _group("g0", [0.1, 0.2])
    assert pickle.loads(pickle.dumps(g)) == g
