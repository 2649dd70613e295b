"""The parent's book of the worker's phases: what the time went to, whatever the pipe carries."""

from __future__ import annotations

import os

import pytest

from rl_kernels.evaluation.sandbox import _Progress


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
