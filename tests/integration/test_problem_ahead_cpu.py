"""A started worker makes the running job's problem before its own job (`eval.sandbox.prestart_problem`):
it says what it made, a failure there is left to its job, and the compile dir it reads and the
one a candidate writes are never the same directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation import sandbox
from rl_kernels.evaluation.build import gated_build
from rl_kernels.evaluation.compile_cache import KeptCompile
from rl_kernels.evaluation.evaluator import Evaluator, task_to_json
from rl_kernels.evaluation.sandbox import PRIME_FILE, Prime, StartedWorker, WorkerSpec
from rl_kernels.tasks import get_task
from processes import gone

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
TASK = "hgemm/fp32/128_128_128"
HONEST = CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp"


@pytest.fixture
def cpu_config(cpu_config: EvalConfig) -> EvalConfig:
    """The shared cpu config with a worker started after each job, making that job's problem."""
    sandbox = cpu_config.sandbox.model_copy(update={"prestart": "after_job", "prestart_problem": True})
    return cpu_config.model_copy(update={"sandbox": sandbox})


@pytest.mark.parametrize("when", ["after_job", "beside_job"])
def test_the_next_worker_makes_the_running_jobs_problem_before_it_is_ready(when: str, cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.prestart = when
    # One worker per evaluation is asserted below: a spread past the limit on a loaded host would re-measure
    # in a second worker, so the limit is lifted (this test is the problem made ahead, not the timer's noise).
    cfg.reward.max_spread = {"cpu": 1e9}
    evaluator = Evaluator(cfg)
    first = evaluator.evaluate(get_task(TASK), HONEST.read_text())
    assert first.correct, first.detail[-1500:]
    worker = evaluator.standby.held
    assert worker is not None and worker.wait_ready(60)
    prime = json.loads((worker.scratch / PRIME_FILE).read_text())
    # The evaluator's data only: no candidate, no seed, nothing of the job the worker will run.
    assert set(prime) == {"task", "backend", "config", "baselines"}, sorted(prime)
    assert prime["task"]["id"] == TASK and prime["baselines"] == ["torch_matmul"]
    m = evaluator.evaluate(get_task(TASK), HONEST.read_text())
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"] == ["standby"]
    ahead = m.extra["problem_ahead"]
    assert ahead["task"] == TASK and ahead["error"] is None and ahead["seconds"] > 0, ahead
    assert m.extra["prestart_s"] >= ahead["seconds"]      # made before the worker said ready
    assert abs(m.speedup - first.speedup) / first.speedup < 0.5, (first.speedup, m.speedup)
    evaluator.close()
    assert gone(worker.proc.pid, 1) and not worker.scratch.exists()


def test_a_problem_that_fails_ahead_is_left_to_the_job(cpu_config: EvalConfig) -> None:
    """A worker primed with a task whose program raises still says ready; its job (another task)
    makes its own problem and is judged as in a fresh worker, and the failure is reported."""
    evaluator = Evaluator(cpu_config)
    assert evaluator.evaluate(get_task(TASK), HONEST.read_text()).correct
    spec = evaluator.standby.held.spec
    evaluator.standby.close()
    broken = {"task": {"id": "broken/task", "kind": "module", "source": "raise RuntimeError('no such model')"},
              "backend": "cpu", "config": cpu_config.model_dump(mode="json"), "baselines": ["eager"]}
    primed = StartedWorker(spec, prime=Prime(broken))
    evaluator.standby._held.append(primed)
    m = evaluator.evaluate(get_task(TASK), HONEST.read_text())
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"] == ["standby"]
    ahead = m.extra["problem_ahead"]
    assert ahead["task"] == "broken/task" and "no such model" in ahead["error"], ahead
    evaluator.close()


def test_a_worker_under_process_isolation_makes_no_problem_that_compiles_ahead(cpu_config: EvalConfig,
                                                                                tmp_path: Path) -> None:
    """Without a mount namespace the worker's compile dir is the shared work dir, where the running
    job's candidate may write: a worker started beside it must not load a baseline from there."""
    process = cpu_config.sandbox.model_copy(update={"isolation": "process"})
    spec = WorkerSpec("cpu", process, compile_dir=tmp_path / "rlk-compile")
    with pytest.raises(ValueError, match="compile dir of its own"):
        StartedWorker(spec, prime=Prime({"task": {"id": "x"}}, store=tmp_path / "store"))


def test_a_candidates_write_to_its_compile_dir_reaches_no_other_worker(cpu_config: EvalConfig, tmp_path: Path) -> None:
    """The candidate writes a Python file into its TORCHINDUCTOR_CACHE_DIR (the fixed work dir's path)
    and computes correctly only once the write succeeded.  It landed in its own worker's compile
    dir: not in the fixed directory on the host, not in the kept store (listed before the candidate
    loaded), and not in the compile dir of the worker started beside it, which makes its problem
    from the store's files while the candidate runs."""
    workdir, store = tmp_path / "rlk-compile-dev", tmp_path / "store"
    (store / "inductor").mkdir(parents=True)
    (store / "inductor" / "kept.txt").write_text("kept by the evaluator\n")
    kept = KeptCompile(store=store, workdir=workdir)
    task = get_task(TASK)
    source = (CANDIDATES / "hacks" / "trust" / "plant_compile_cache_cpu.cpp").read_text()
    build = gated_build(task, source, cpu_config)
    assert build.ok, build.log[-1500:]
    spec = WorkerSpec("cpu", cpu_config.sandbox, compile_dir=workdir)
    job = {"job": "evaluate", "task": task_to_json(task), "backend": "cpu", "config": cpu_config.model_dump(mode="json"),
           "baseline": "torch_matmul", "candidate_source": source, "seed": 20261207, "own_kernels": build.kernels}
    beside = StartedWorker(spec, prime=Prime({**{k: job[k] for k in ("task", "backend", "config")},
                                              "baselines": ["torch_matmul"]}, store=store))
    try:
        res = sandbox.run_job(job, build.artifact, build.artifact_name, spec, kept, beside=[beside])
        assert res.failure() is None and res.payload and res.payload.get("ok"), (res.payload, res.stderr_tail[-800:])
        assert beside.wait_ready(60)
        assert beside.progress.ahead and beside.progress.ahead["error"] is None, beside.progress.ahead
        assert (beside.compile_dir / "inductor" / "kept.txt").is_file()
        assert not list(beside.compile_dir.rglob("planted*"))
        assert not list(workdir.rglob("planted*")) and not list(store.rglob("planted*"))
    finally:
        beside.discard()


def test_a_job_takes_the_worker_that_made_its_tasks_problem(cpu_config: EvalConfig) -> None:
    """Three workers wait: the oldest is still getting ready (stopped), the next made another task's
    problem, the youngest this task's.  A job of this task takes the youngest, a job of a third task
    the older ready one, and only then is the one still getting ready waited for (`ready_s`)."""
    import os
    import signal

    from rl_kernels.evaluation.standby import Standby

    spec = WorkerSpec("cpu", cpu_config.sandbox)

    def prime(task_id: str) -> Prime:
        return Prime({"task": task_to_json(get_task(task_id)), "backend": "cpu",
                      "config": cpu_config.model_dump(mode="json"), "baselines": ["torch_matmul"]})

    standby = Standby(True, 1.0, size=3)
    stuck = standby.start(spec)
    os.killpg(stuck.proc.pid, signal.SIGSTOP)      # milliseconds after its start: far from ready
    older = standby.start(spec, prime("hgemm/fp32/256_256_256"))
    younger = standby.start(spec, prime(TASK))
    standby._held.extend([stuck, older, younger])
    try:
        assert older.wait_ready(60) and younger.wait_ready(60)
        assert standby.take(spec, TASK) == (younger, "standby")
        assert standby.take(spec, "hgemm/fp32/512_512_512") == (older, "standby")
        assert standby.take(spec, TASK) == (None, "not_ready")
        assert gone(stuck.proc.pid, 5)
    finally:
        standby.close()
        older.discard()
        younger.discard()
