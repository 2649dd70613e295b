"""What the main job is doing, as one line, for the stretches in which nothing else is printed.

A group on the embedded default takes minutes (a 135M model writing four 1200-token answers on two
cores, then builds and timings), and on a GPU the engine and the learner start for minutes before
the first group ends: without a line in between, a user cannot tell a slow step from a hung one.
The producer keeps a `GroupProgress` per group in flight; the driver's status task prints
`status_line` when `metrics.status_every_s` passed since the last line of any kind (`Console`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class GroupProgress:
    """One group between its slot and its submission."""

    task_id: str
    version: int
    started: float = field(default_factory=time.monotonic)
    phase: str = "sampling"   # sampling -> measuring (its kernels building and timing)
    kernels: int = 0          # distinct kernels of the group to measure
    measured: int = 0         # of them, measured so far


class Console:
    """Prints the job's lines and remembers when it last did, so a status line fills only silences."""

    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled, self.clock = enabled, clock
        self.last = clock()

    def say(self, line: str) -> None:
        if self.enabled:
            print(line, flush=True)
        self.last = self.clock()

    def quiet_for(self) -> float:
        """Seconds since the last line."""
        return self.clock() - self.last


def counted(n: int, noun: str) -> str:
    """`1 group`, `2 groups`: a count for a line the job prints."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def status_line(elapsed: float, groups: list[GroupProgress], activity: str | None, queues: dict[str, int],
                done: int, step: int, version: int, now: float) -> str:
    """e.g. `status 4m10s: 2 groups in flight: builtin/rmsnorm v1 sampling 3m02s; builtin/softmax v1
    measuring 2/3 kernels 4m08s | queues: generate 0, compile 1, time 0 | 5 groups done, step 2, policy v2`."""
    if groups:
        oldest = sorted(groups, key=lambda g: g.started)
        shown = [f"{g.task_id} v{g.version} " + ("sampling" if g.phase == "sampling" else
                                                 f"measuring {g.measured}/{g.kernels} kernels")
                 + f" {_duration(now - g.started)}" for g in oldest[:3]]
        more = f" (+{len(groups) - 3} more)" if len(groups) > 3 else ""
        flight = f"{counted(len(groups), 'group')} in flight: " + "; ".join(shown) + more
    else:
        flight = activity or "no group in flight (waiting for a slot: the staleness bound or the learner)"
    q = ", ".join(f"{k} {v}" for k, v in queues.items())
    return (f"status {_duration(elapsed)}: {flight} | queues: {q} | {counted(done, 'group')} done, "
            f"step {step}, policy v{version}")
