"""Rebuild the replay buffer of a resumed training run from trajectories.jsonl and a checkpoint.

The file is the record of truth: every scored group was persisted before it counted, and every
consumption, stale drop and failure was appended as an event. A checkpoint taken after learner
step S (policy version V) says which of those consumptions are baked into the restored weights:
the ones of steps <= S. Consumptions by later steps died with the crash, so their groups go back
into the buffer and are trained on again; stale drops decided at versions > V are undone the same
way (at version V the group may be admissible again; `drop_stale` decides afresh). Nothing scored
is lost and nothing is trained twice into the restored weights.

A run may have been resumed before: each `{"event": "resumed", "step", "version"}` record applies
the same rule to the history before it, so replaying the whole file in order is always right.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rl_kernels.staleness import StalenessManager
from rl_kernels.trajectories import Group

RESUMED = "resumed"


@dataclass
class RestoredBuffer:
    manager: StalenessManager
    waiting: dict[str, Group]       # accepted and not (effectively) consumed, in acceptance order
    requeued: list[str]             # consumed or dropped after the checkpoint, now waiting again


def restore_buffer(records: Iterable[dict[str, Any]], *, step: int, version: int, max_staleness: int,
                   batch_groups: int) -> RestoredBuffer:
    """Replay `records` (trajectories.jsonl in order) as of a checkpoint at learner `step`, `version`."""
    groups: dict[str, Group] = {}            # accepted groups, acceptance order
    state: dict[str, str] = {}               # id -> buffered | consumed | dropped_stale | filtered/.. | failed/..
    consumed_step: dict[str, int] = {}
    dropped_version: dict[str, int] = {}
    requeued: list[str] = []

    def rewind(upto_step: int, upto_version: int) -> list[str]:
        back = [gid for gid, s in consumed_step.items() if s > upto_step and state[gid] == "consumed"]
        back += [gid for gid, v in dropped_version.items() if v > upto_version and state[gid] == "dropped_stale"]
        for gid in back:
            state[gid] = "buffered"
            consumed_step.pop(gid, None)
            dropped_version.pop(gid, None)
        return back

    for rec in records:
        if "group" in rec:
            gid = rec["group"]["group_id"]
            status = rec["status"]
            if status == "accepted":
                groups[gid] = Group.from_json(rec["group"])
                state[gid] = "buffered"
            else:
                state[gid] = status
            continue
        event = rec.get("event")
        if event == "consumed":
            if rec.get("step") is None:
                raise ValueError("trajectories.jsonl has a 'consumed' event without a learner step: it was "
                                 "written by `rl-kernels rollout` (search mode), which cannot be resumed as training")
            for gid in rec["group_ids"]:
                state[gid] = "consumed"
                consumed_step[gid] = int(rec["step"])
        elif event == "dropped_stale":
            for gid in rec["group_ids"]:
                state[gid] = "dropped_stale"
                dropped_version[gid] = int(rec["version"])
        elif event == "failed":
            for gid in rec["group_ids"]:
                state[gid] = f"failed/{rec['reason']}"
        elif event == RESUMED:
            rewind(int(rec["step"]), int(rec["version"]))
        else:
            raise ValueError(f"unknown trajectories.jsonl event {event!r}")
    requeued = rewind(step, version)

    counts = Counter(s.split("/", 1)[0] for s in state.values())
    filtered = Counter(s.split("/", 1)[1] for s in state.values() if s.startswith("filtered/"))
    failed = Counter(s.split("/", 1)[1] for s in state.values() if s.startswith("failed/"))
    waiting = {gid: g for gid, g in groups.items() if state[gid] == "buffered"}
    done = {gid: (s if s in ("consumed", "dropped_stale") else f"{s.split('/', 1)[0]} ({s.split('/', 1)[1]})")
            for gid, s in state.items() if s != "buffered"}
    manager = StalenessManager(max_staleness, batch_groups, learner=True)
    manager.load_state_dict({
        "max_staleness": max_staleness, "batch_groups": batch_groups, "learner": True, "version": version,
        "running": {}, "buffered": {gid: g.policy_version for gid, g in waiting.items()}, "done": done,
        "submitted": len(state), "accepted": len(groups), "consumed": counts["consumed"],
        "dropped_stale": counts["dropped_stale"], "refused": 0, "filtered": dict(filtered), "failed": dict(failed),
    })
    return RestoredBuffer(manager=manager, waiting=waiting, requeued=requeued)
