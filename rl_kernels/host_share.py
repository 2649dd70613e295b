"""A CPU host shared by a timer and other work: the other work pauses while the timer measures.

On the cpu backend with shared cores (the embedded default runs the generator, the learner, the
compile jobs and the timer on two cores), a measurement competes for the very cores it times: the
same program measured 2-8x apart from one group to the next, and multi-threaded candidates gained
nothing over single-threaded ones.  With `eval.quiet_host`, an evaluation holds this host's lock
exclusively while it holds the device, and the competing work holds it shared, one unit at a time
(a generated token, a learner micro-batch, a build): it finishes the unit in progress and waits at
the next boundary.

Writer preference from two flock files: a timer first closes the gate (no new unit starts), then
waits for the units in progress to leave the room, so a generator taking one token after another
cannot starve it.  flock locks die with their process: a killed worker, actor or timer never leaves
the host paused.  A process must not measure while it holds a shared use (flock locks are per open
file, so it would wait for itself); nothing in the pipeline does.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rl_kernels.config import EvalConfig


@dataclass(frozen=True)
class HostShare:
    """The lock of one host: `room` is held shared by work units and exclusively by a timer,
    `gate` is held exclusively by a timer waiting for the room (and briefly shared by a unit
    entering)."""

    room: Path

    @property
    def gate(self) -> Path:
        return self.room.with_name(self.room.name + ".gate")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[float]:
        """Hold the host alone; yields the seconds spent waiting for units in progress to finish."""
        t0 = time.monotonic()
        with _locked(self.gate, fcntl.LOCK_EX), _locked(self.room, fcntl.LOCK_EX):
            yield time.monotonic() - t0


def host_share(cfg: EvalConfig) -> HostShare | None:
    """This host's share when `eval.quiet_host` is on (None otherwise); every process on the host
    that reads the same config finds the same files under `build.cache_dir`."""
    if not cfg.quiet_host:
        return None
    digest = hashlib.sha256(platform.node().encode()).hexdigest()[:16]
    room = Path(cfg.build.cache_dir) / "locks" / f"host-{digest}.lock"
    room.parent.mkdir(parents=True, exist_ok=True)
    return HostShare(room)


class SharedUse:
    """Work that yields the host to timers between its units.

        with SharedUse(share) as use:
            for unit in work:
                use.between()      # a waiting timer goes first
                do(unit)

    With `share` None every call is a no-op, so callers need no branch of their own.
    """

    def __init__(self, share: HostShare | None) -> None:
        self.share = share
        self._room: int | None = None
        self._gate: int | None = None

    def __enter__(self) -> "SharedUse":
        if self.share is not None:
            self._room = _open(self.share.room)
            self._gate = _open(self.share.gate)
            self._enter()
        return self

    def between(self) -> None:
        """End the unit that ran, let a waiting timer measure, then start the next unit."""
        if self._room is not None:
            fcntl.flock(self._room, fcntl.LOCK_UN)
            self._enter()

    def __exit__(self, *exc: object) -> None:
        for fd in (self._room, self._gate):
            if fd is not None:
                os.close(fd)   # closing the file releases its lock
        self._room = self._gate = None

    def _enter(self) -> None:
        assert self._room is not None and self._gate is not None
        fcntl.flock(self._gate, fcntl.LOCK_SH)   # waits while a timer holds or awaits the room
        try:
            fcntl.flock(self._room, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    fd = _open(path)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)
