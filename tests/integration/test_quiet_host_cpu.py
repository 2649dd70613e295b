"""`eval.quiet_host` end to end on the cpu backend: an evaluation waits for the unit of shared work
in progress and reports the wait, and a build waits while an evaluation holds the host."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.build import gated_build
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.host_share import HostShare, SharedUse, host_share
from rl_kernels.tasks import get_task

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
TASK = "hgemm/fp32/128_128_128"
UNIT_S = 1.0


def _slow_units(room: str, started: str, seconds: float) -> None:
    """Units of UNIT_S back to back (a learner's micro-batches), announcing the first."""
    end = time.monotonic() + seconds
    with SharedUse(HostShare(Path(room))) as use:
        Path(started).touch()
        while time.monotonic() < end:
            time.sleep(UNIT_S)
            use.between()


def _quiet(cpu_config: EvalConfig) -> EvalConfig:
    return cpu_config.model_copy(update={"quiet_host": True})


def test_an_evaluation_waits_for_the_unit_in_progress_and_says_how_long(cpu_config: EvalConfig,
                                                                         tmp_path: Path) -> None:
    cfg = _quiet(cpu_config)
    share = host_share(cfg)
    assert share is not None
    task, source = get_task(TASK), (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text()
    evaluator = Evaluator(cfg)
    evaluator.baselines(task)   # measured (and cached) before the worker starts
    started = tmp_path / "started"
    worker = multiprocessing.get_context("spawn").Process(
        target=_slow_units, args=(str(share.room), str(started), 600.0), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        m = evaluator.evaluate(task, source)
    finally:
        worker.kill()
        worker.join(10)
    assert m.correct, m.detail[-1500:]
    # It waited for the rest of a 1 s unit (none of it measured), and at most about one unit.
    assert 0.0 < m.extra["host_wait_s"] <= UNIT_S + 0.5, m.extra["host_wait_s"]


def test_a_build_waits_while_an_evaluation_holds_the_host(cpu_config: EvalConfig) -> None:
    cfg = _quiet(cpu_config)
    share = host_share(cfg)
    assert share is not None
    source = (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text() + "\n// built while quiet\n"
    builds = []
    with share.exclusive():
        thread = threading.Thread(target=lambda: builds.append(gated_build(get_task(TASK), source, cfg)))
        thread.start()
        thread.join(1.5)
        assert thread.is_alive() and not builds, "a build ran while an evaluation held the host"
    thread.join(300)
    assert builds and builds[0].ok, builds[0].log[-1500:] if builds else "no build"
