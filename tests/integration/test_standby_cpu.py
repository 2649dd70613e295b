"""The worker started ahead of the next job (after the job before it, or beside it and stopped while
it times): it serves exactly one job, and when it cannot (it died, it never finished its imports, it
was started for other settings) the job runs in a fresh worker with the same verdict; an unused
one ends with its evaluator or with the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.evaluation.sandbox import StartedWorker, WorkerSpec, group_members
from rl_kernels.tasks import get_task
from rl_kernels.tasks.module import load_module_task
from processes import gone

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
TASK = "hgemm/fp32/128_128_128"


def _honest() -> str:
    return (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text()


@pytest.fixture
def cpu_config(cpu_config: EvalConfig) -> EvalConfig:
    """The shared cpu config with workers started after each job (the suite's own starts none)."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.prestart = "after_job"
    return cfg



def _evaluator_with_a_started_worker(cfg: EvalConfig) -> tuple[Evaluator, StartedWorker]:
    evaluator = Evaluator(cfg)
    first = evaluator.evaluate(get_task(TASK), _honest())
    assert first.correct, first.detail[-1500:]
    worker = evaluator.standby.held
    assert worker is not None
    return evaluator, worker


@pytest.mark.parametrize("when", ["after_job", "beside_job"])
def test_the_next_job_runs_in_the_worker_started_for_it_and_nothing_is_left(when: str, cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.prestart = when
    evaluator, worker = _evaluator_with_a_started_worker(cfg)
    assert worker.wait_ready(60)
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"][0] == "standby" and m.extra["prestart_s"] > 0
    assert m.extra["phase_s"]["start"] < 1.0, m.extra["phase_s"]   # its imports were done before the job
    assert not worker.scratch.exists() and gone(worker.proc.pid, 1)   # used once, then gone
    nxt = evaluator.standby.held
    assert nxt is not None and nxt is not worker
    evaluator.close()
    assert evaluator.standby.held is None and not nxt.scratch.exists() and gone(nxt.proc.pid, 1)


def test_several_started_workers_serve_the_next_jobs_oldest_first(cpu_config: EvalConfig) -> None:
    """With `prestart_workers: 2` two workers wait (started beside the job, so both are stopped during
    its timed phases); each job takes the oldest and one more starts, so two are held again; the
    evaluator's end ends both."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.prestart = "beside_job"
    cfg.sandbox.prestart_workers = 2
    evaluator, _ = _evaluator_with_a_started_worker(cfg)
    first, second = evaluator.standby.workers
    assert first.wait_ready(60) and second.wait_ready(60)
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct and m.extra["workers"] == ["standby"], m.extra.get("workers")
    assert gone(first.proc.pid, 5) and not first.scratch.exists()      # the oldest served the job
    held = evaluator.standby.workers
    assert len(held) == 2 and held[0] is second and held[1] not in (first, second)
    evaluator.close()
    assert not evaluator.standby.workers
    assert all(gone(w.proc.pid, 5) and not w.scratch.exists() for w in held)


def test_a_started_worker_that_died_is_replaced_by_a_fresh_one(cpu_config: EvalConfig) -> None:
    evaluator, worker = _evaluator_with_a_started_worker(cpu_config)
    os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait()
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"][0] == "fresh (the started worker: died)"
    assert not worker.scratch.exists()


def test_a_started_worker_that_hangs_before_it_is_ready_is_replaced(cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.prestart_ready_s = 2
    evaluator, worker = _evaluator_with_a_started_worker(cfg)
    spec = worker.spec
    evaluator.standby.close()
    stuck = StartedWorker(spec)
    os.killpg(stuck.proc.pid, signal.SIGSTOP)   # milliseconds after its start: far from done importing torch
    evaluator.standby._held.append(stuck)
    t0 = time.monotonic()
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"][0] == "fresh (the started worker: not_ready)"
    assert time.monotonic() - t0 >= 2 and gone(stuck.proc.pid, 5) and not stuck.scratch.exists()
    evaluator.close()


def test_a_worker_started_for_other_settings_is_not_used(cpu_config: EvalConfig) -> None:
    evaluator, worker = _evaluator_with_a_started_worker(cpu_config)
    other = cpu_config.model_copy(deep=True)
    other.sandbox.keep_freed_memory = not other.sandbox.keep_freed_memory   # another environment
    evaluator.cfg = other
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"][0] == "fresh (the started worker: other_settings)"
    assert gone(worker.proc.pid, 5)
    evaluator.close()


def test_an_unused_worker_ends_with_the_process_that_started_it(cpu_config: EvalConfig, tmp_path: Path) -> None:
    """Killed outright, the owner runs no cleanup: the worker reads the end of its go pipe (and has
    the parent-death signal) and exits without having read any job."""
    script = (
        "import json, os, sys\n"
        "from rl_kernels.config import EvalConfig\n"
        "from rl_kernels.evaluation.sandbox import WorkerSpec\n"
        "from rl_kernels.evaluation.standby import Standby\n"
        "cfg = EvalConfig.model_validate(json.loads(sys.argv[1]))\n"
        "standby = Standby(True, 60)\n"
        "standby.refill(WorkerSpec('cpu', cfg.sandbox))\n"
        "w = standby.held\n"
        "assert w.wait_ready(60)\n"
        "print(w.proc.pid, w.scratch, flush=True)\n"
        "os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", script, cpu_config.model_dump_json()], capture_output=True,
                         text=True, timeout=120)
    pid, scratch = out.stdout.split()
    assert gone(int(pid), 10), "the started worker outlived its owner"
    assert not (Path(scratch) / "job.json").exists()


def test_workers_import_the_audit_tools_ahead_from_the_first_job_that_audits(cpu_config: EvalConfig) -> None:
    """A cpu hgemm job records no ATen ops and no launches: its next worker imports nothing for them.
    A module job's candidate is audited for torch fallbacks (a dispatch mode, which imports
    torch._dynamo on first use): from then on every worker imports that ahead, and the audit still
    refuses nothing honest."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.prestart = "after_job"
    cfg.baselines.module = ["eager"]
    evaluator, worker = _evaluator_with_a_started_worker(cfg)
    assert not worker.spec.dispatch_tools
    task = load_module_task(CANDIDATES / "honest" / "tasks" / "relu.py", task_id="test/relu")
    m = evaluator.evaluate(task, (CANDIDATES / "honest" / "relu_cpu.py").read_text())
    assert m.correct and m.rejected is None, m.detail[-1500:]
    assert evaluator.standby.held is not None and evaluator.standby.held.spec.dispatch_tools
    again = evaluator.evaluate(get_task(TASK), _honest())      # an hgemm job after it: the tools stay
    assert again.correct and again.extra["workers"] == ["standby"], again.extra.get("workers")
    assert evaluator.standby.held is not None and evaluator.standby.held.spec.dispatch_tools
    evaluator.close()


@pytest.mark.slow
def test_a_started_worker_loads_the_kept_compiled_baseline(cpu_config: EvalConfig, tmp_path: Path) -> None:
    """The kept compile caches are copied into their work dir after the worker was started (and had
    the dir bound into its namespace): the evaluation still loads the baseline that the baseline
    measurement compiled (inductor's FX-graph cache hits, no miss).  Slow: inductor compiles the
    cpu baseline with the host compiler (~2 min on 2 cores); the GPU suite checks the same on cuda."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.baselines.module = ["compile"]
    cfg.sandbox.scratch_root = tmp_path          # this test's own compile work dir
    task = get_task("builtin/rmsnorm")
    evaluator = Evaluator(cfg)
    build = evaluator.build(task, task.seeds["cpu"])
    evaluator.best_baseline(task)                # compiles torch.compile's baseline and keeps it
    assert evaluator.standby.held is not None and evaluator.standby.held.spec.compile_dir is not None
    m = evaluator.evaluate(task, task.seeds["cpu"], build)
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"][0] == "standby"
    counters = m.extra["baseline_compile"]
    assert counters.get("fxgraph_cache_hit", 0) > 0 and counters.get("fxgraph_cache_miss", 0) == 0, counters
    evaluator.close()


def _group_states(pgid: int) -> set[str]:
    states = set()
    for pid in group_members(pgid):
        try:
            states.add(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue
    return states


def _stopped_within(pgid: int, seconds: float) -> bool:
    """Every process of the group is stopped (SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _group_states(pgid) == {"T"}:
            return True
        time.sleep(0.02)
    return False


def test_a_worker_still_importing_beside_a_timed_phase_is_stopped_until_it_may_go_on(cpu_config: EvalConfig) -> None:
    worker = StartedWorker(WorkerSpec("cpu", cpu_config.sandbox))
    try:
        worker.pause()                              # milliseconds after its start: still importing
        assert _stopped_within(worker.proc.pid, 2)
        assert not worker.progress.ready.wait(3)    # stopped: no import progress
        worker.resume()
        assert worker.wait_ready(60) and worker.paused_s >= 3
        worker.pause()                              # ready: it only waits on a pipe, nothing to stop
        assert "T" not in _group_states(worker.proc.pid)
    finally:
        worker.discard()
    assert gone(worker.proc.pid, 1) and not worker.scratch.exists()
