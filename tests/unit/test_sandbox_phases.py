"""The parent's book of the worker's phases and heartbeats: what the time went to, and when silence
means a hang, whatever the pipe carries."""

from __future__ import annotations

import os

import pytest

from rl_kernels.config import SandboxConfig
from rl_kernels.evaluation.sandbox import WATCH_EVERY_S, Watchdog, _Progress
from rl_kernels.evaluation.worker import Reporter


def test_phase_seconds_follow_the_lines_and_ignore_what_is_not_a_phase() -> None:
    progress = _Progress()
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w") as w:
        w.write('{"phase": "setup"}\n{"phase": "load"}\n')
        w.write('{"phase": not json\n{"phase": 7}\n{"phase"}\n{"beat": 1}\n')   # candidate code may write here
        w.write('{"phase": "timing"}\n')
    progress.read(read_fd)
    names = [name for name, _ in progress.marks]
    assert names == ["start", "setup", "load", "timing"]
    end = progress.marks[-1][1] + 2.0
    spent = progress.phase_seconds(end)
    assert list(spent) == names and spent["timing"] == 2.0
    assert sum(spent.values()) == pytest.approx(end - progress.marks[0][1], abs=0.01)


def test_a_ready_line_marks_the_worker_ready_and_is_not_part_of_its_job() -> None:
    progress = _Progress()
    seen: list[str] = []
    progress.on_phase = seen.append
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w") as w:
        w.write('{"ready": 1}\n')
    progress.read(read_fd)
    assert progress.ready.is_set() and progress.ready_at is not None
    at = progress.ready_at + 5.0
    progress.begin(at)   # the job starts: the time it waited is not the job's
    assert progress.lines == [] and progress.marks == [("start", at)]
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w") as w:
        w.write('{"phase": "setup"}\n{"phase": "timing"}\n{"ok": true, "final": true}\n')
    progress.read(read_fd)
    assert seen == ["setup", "timing"]
    assert [n for n, _ in progress.marks] == ["start", "setup", "timing", "teardown"]   # the verdict, then the exit


def _lines(progress: _Progress, text: str) -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w") as w:
        w.write(text)
    progress.read(read_fd)


def test_the_watchdog_allows_the_calls_the_last_line_announced() -> None:
    """A heartbeat names the candidate calls now in flight; any other line, or a malformed beat
    (candidate code may write here under the shared boundary), counts as one."""
    dog = Watchdog(floor_s=2.0, per_call_s=0.5)
    progress = _Progress()
    _lines(progress, '{"phase": "timing"}\n{"beat": 10}\n')
    assert progress.calls == 10 and progress.watched
    assert dog.hang(progress, progress.last_at + 2.0 + 10 * 0.5) is None
    hang = dog.hang(progress, progress.last_at + 7.1)
    assert hang is not None and hang["calls"] == 10 and hang["limit_s"] == 7.0 and hang["phase"] == "timing"
    for line in ('{"beat": 1}\n', '{"phase": "launches"}\n', '{"beat": -3}\n', '{"beat": "many"}\n', '{"beat": 2.5}\n'):
        _lines(progress, line)
        assert progress.calls == 1, line
    assert dog.hang(progress, progress.last_at + 2.6) is not None


def test_nothing_is_hung_before_the_candidate_is_loaded() -> None:
    progress = _Progress()
    _lines(progress, '{"phase": "warm"}\n')
    assert Watchdog(floor_s=0.1, per_call_s=0.0).hang(progress, progress.last_at + 100.0) is None


def test_a_skipped_heartbeat_never_lowers_the_allowance() -> None:
    """Heartbeats are throttled, but one announcing more calls than the last written is always
    written: the parent may allow more than the work in flight, never less."""
    read_fd, write_fd = os.pipe()
    report = Reporter(write_fd)
    report.beat(10)   # a window: written
    report.beat(1)    # its answer, at once: skipped (the parent still allows 10)
    report.beat(10)   # the next window: skipped, 10 are allowed already
    report.beat(64)   # a larger batch: written at once
    report.beat(1)
    report.out.close()
    with os.fdopen(read_fd) as r:
        assert r.read().splitlines() == ['{"beat": 10}', '{"beat": 64}']


def test_the_defaults_keep_the_promise() -> None:
    """A 0.02x kernel's call fits one call's allowance with room to spare, and a hang is reported
    at most 10 s after the calls in flight should have ended at that speed (the floor, one skipped
    heartbeat, one look of the parent)."""
    sandbox = SandboxConfig()
    assert sandbox.hang_factor >= 2 * 50
    assert sandbox.hang_floor_s + Reporter.BEAT_EVERY_S + WATCH_EVERY_S <= 10.0
