"""The host share (`eval.quiet_host`): a timer holds the host alone, other work pauses at its next
unit boundary, a busy worker cannot starve the timer, and a killed holder never leaves the host
paused.  Real processes and real flock files; the generator, learner, build and evaluator ends are
tested where those components are."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rl_kernels.config import BuildConfig, EvalConfig
from rl_kernels.host_share import HostShare, SharedUse, host_share

UNIT_S = 0.05


def _units(room: str, log: str, seconds: float) -> None:
    """Back-to-back units of `UNIT_S` for `seconds`, each logged as `start end` (monotonic)."""
    end = time.monotonic() + seconds
    with SharedUse(HostShare(Path(room))) as use, open(log, "w") as out:
        while time.monotonic() < end:
            use.between()
            t0 = time.monotonic()
            time.sleep(UNIT_S)
            out.write(f"{t0} {time.monotonic()}\n")
            out.flush()


def _hold(room: str, exclusive: bool) -> None:
    share = HostShare(Path(room))
    if exclusive:
        with share.exclusive():
            time.sleep(600)
    with SharedUse(share):
        time.sleep(600)


def _spawn(target, *args) -> multiprocessing.Process:   # noqa: ANN001 - a module-level function
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def test_it_is_off_unless_configured_and_then_one_file_per_host(tmp_path: Path) -> None:
    assert host_share(EvalConfig()) is None
    with SharedUse(None) as use:   # nothing to hold: no-ops
        use.between()
    cfg = EvalConfig(quiet_host=True, build=BuildConfig(cache_dir=tmp_path))
    share = host_share(cfg)
    assert share is not None and share == host_share(cfg)
    assert share.room.parent == tmp_path / "locks"


def test_work_pauses_while_a_timer_holds_the_host_and_cannot_starve_it(tmp_path: Path) -> None:
    room, log = tmp_path / "host.lock", tmp_path / "units.txt"
    worker = _spawn(_units, str(room), str(log), 3.0)
    deadline = time.monotonic() + 60
    while (not log.exists() or len(log.read_text().splitlines()) < 5) and time.monotonic() < deadline:
        time.sleep(0.02)   # the worker is running units back to back
    windows = []
    for _ in range(3):
        with HostShare(room).exclusive() as waited:
            t0 = time.monotonic()
            time.sleep(0.3)
            windows.append((t0, time.monotonic(), waited))
        time.sleep(0.2)
    worker.join(30)
    units = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    for t0, t1, waited in windows:
        # The timer waited for at most the unit in progress (plus scheduling slack)...
        assert waited < UNIT_S + 0.25, waited
        # ...and no unit ran while it held the host.
        assert not [u for u in units if u[0] < t1 and u[1] > t0], (t0, t1)
        # The worker resumed after the window.
        assert any(u[0] >= t1 for u in units)


@pytest.mark.parametrize("exclusive", [False, True], ids=["worker", "timer"])
def test_a_killed_holder_never_leaves_the_host_held(tmp_path: Path, exclusive: bool) -> None:
    room = tmp_path / "host.lock"
    holder = _spawn(_hold, str(room), exclusive)
    deadline = time.monotonic() + 60
    while not room.with_name(room.name + ".gate").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)   # the holder has its lock now
    got = threading.Event()

    def take() -> None:
        if exclusive:
            with SharedUse(HostShare(room)):
                got.set()
        else:
            with HostShare(room).exclusive():
                got.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    assert not got.wait(0.5), "the other side got the host while it was held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    assert got.wait(10), "the host stayed held after its holder was killed"
