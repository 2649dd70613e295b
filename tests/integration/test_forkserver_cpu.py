"""Workers forked from the fork server: confined as a worker started as a new process is (own session,
namespaces, no capabilities, none of the server's descriptors, its own environment), serving one job
each with the same verdicts; a dead server is replaced, and nothing outlives the server or its owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation import sandbox, standby
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.evaluation.forkserver import ForkServer, ForkServerError
from rl_kernels.evaluation.sandbox import StartedWorker, WorkerSpec
from rl_kernels.tasks import get_task
from processes import gone

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
TASK = "hgemm/fp32/128_128_128"
NAMESPACES = ("user", "pid", "mnt", "net", "ipc", "uts")


def _honest() -> str:
    return (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text()



def _the_worker(worker: StartedWorker) -> int:
    """The pid of the process that serves the job: pid 1 of its PID namespace (the forked process's
    only child)."""
    children = Path(f"/proc/{worker.proc.pid}/task/{worker.proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def _sockets(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def _status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(field)


def test_a_forked_worker_is_isolated_from_the_server_and_from_the_other_workers(cpu_config: EvalConfig) -> None:
    cfg = cpu_config.sandbox
    spec = WorkerSpec("cpu", cfg)
    server = ForkServer(spec.environment, spec.flags, cfg.scratch_root, 120)
    try:
        a, b = StartedWorker(spec, server), StartedWorker(spec, server)
        assert a.wait_ready(60) and b.wait_ready(60)
        wa, wb = _the_worker(a), _the_worker(b)
        for started, pid in ((a, wa), (b, wb)):
            assert os.getpgid(pid) == started.proc.pid != os.getpgid(server.proc.pid)   # its own session
            # /proc shows the environment the server was started with (a fork's own is os.environ):
            # the scrubbed one and the server's NVML switch, nothing of the caller's
            shown = {v.split(b"=", 1)[0].decode() for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if v}
            allowed = {*spec.environment(started.scratch), "PYTORCH_NVML_BASED_CUDA_CHECK"}
            assert shown <= allowed, shown - allowed
            # it works where the server imported, which in its mount namespace is its own scratch dir
            assert os.readlink(f"/proc/{pid}/cwd") == str(server.home)
            (started.scratch / "marker").write_text(str(pid))
            (server.home / "the-servers-own").write_text("")
            seen = Path(f"/proc/{pid}/root{server.home}")
            assert (seen / "marker").read_text() == str(pid) and not (seen / "the-servers-own").exists()
            # nothing the worker runs can talk to the server: none of its sockets is the server's
            assert not _sockets(pid) & _sockets(server.proc.pid)
        for ns in NAMESPACES:
            mine = {os.readlink(f"/proc/{p}/ns/{ns}") for p in (server.proc.pid, wa, wb)}
            assert len(mine) == 3, f"{ns} namespace shared: {mine}"
        assert int(_status(wa, "CapEff"), 16) == 0 and int(_status(wa, "CapPrm"), 16) == 0
        assert _status(wa, "NoNewPrivs") == "1"
        assert _status(wa, "NSpid").split()[-1] == "1"       # pid 1 of its own PID namespace
        for started in (a, b):
            started.discard()
            assert gone(started.proc.pid, 5) and not started.scratch.exists()
    finally:
        server.close()
    assert gone(server.proc.pid, 5)


def test_a_forked_worker_serves_one_job_and_never_imports_what_was_planted_in_its_scratch(
        cpu_config: EvalConfig) -> None:
    """Its scratch dir is its working dir and the candidate's to write; neither is on sys.path."""
    evaluator = Evaluator(cpu_config)
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct and m.extra["forked"], m.detail[-1500:]
    spec = WorkerSpec("cpu", cpu_config.sandbox, readable=tuple(evaluator._readable({"job": "evaluate"})))
    server = evaluator.standby.server(spec)
    worker = StartedWorker(spec, server)
    assert worker.wait_ready(60)
    (worker.scratch / "rl_kernels").mkdir()
    for planted in (worker.scratch / "rl_kernels" / "__init__.py", worker.scratch / "secrets.py",
                    worker.scratch / "json.py"):
        planted.write_text("raise SystemExit('the planted module ran')")
    job = {"job": "nothing"}   # not a job the worker knows: it must fail by its own code, not the planted one
    res = sandbox.run_job(job, None, "", spec, worker=worker)
    assert "planted module ran" not in res.stderr_tail
    assert res.payload is not None and res.payload.get("ok") is False, res.stderr_tail[-1500:]
    evaluator.close()


def test_a_server_that_died_is_replaced_and_its_workers_died_with_it(cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.prestart = "after_job"
    evaluator = Evaluator(cfg)
    assert evaluator.evaluate(get_task(TASK), _honest()).correct
    worker = evaluator.standby.held
    assert worker is not None and worker.forked and worker.wait_ready(60)
    (server,) = [s for _, s in evaluator.standby._servers]
    os.kill(server.proc.pid, signal.SIGKILL)
    assert gone(worker.proc.pid, 5), "a forked worker outlived its server"
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct, m.detail[-1500:]
    assert m.extra["workers"][0] == "fresh (the started worker: died)" and m.extra["forked"]
    (again,) = [s for _, s in evaluator.standby._servers]
    assert again is not server and again.alive
    evaluator.close()
    assert gone(again.proc.pid, 5)


def test_the_server_and_its_workers_end_with_the_process_that_started_them(cpu_config: EvalConfig) -> None:
    """Killed outright, the owner runs no cleanup: the server has the parent-death signal, and so
    has each worker it forked."""
    script = (
        "import json, os, sys\n"
        "from rl_kernels.config import EvalConfig\n"
        "from rl_kernels.evaluation.sandbox import WorkerSpec\n"
        "from rl_kernels.evaluation.standby import Standby\n"
        "cfg = EvalConfig.model_validate(json.loads(sys.argv[1]))\n"
        "standby = Standby(True, 60, 2, fork_server=True)\n"
        "spec = WorkerSpec('cpu', cfg.sandbox)\n"
        "standby.refill(spec)\n"
        "assert all(w.wait_ready(60) for w in standby.workers)\n"
        "print(standby.server(spec).proc.pid, *[w.proc.pid for w in standby.workers], flush=True)\n"
        "os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", script, cpu_config.model_dump_json()], capture_output=True,
                         text=True, timeout=180)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 3, out.stderr[-1500:]
    assert all(gone(pid, 10) for pid in pids), "the fork server or a worker outlived its owner"


def test_without_namespaces_every_worker_is_a_new_process(cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.isolation = "process"
    evaluator = Evaluator(cfg)
    m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct and m.extra["forked"] is False, m.detail[-1500:]
    assert not evaluator.standby._servers
    evaluator.close()


def test_a_server_that_cannot_start_says_why(cpu_config: EvalConfig) -> None:
    spec = WorkerSpec("cpu", cpu_config.sandbox)
    server = ForkServer(lambda home: dict(spec.environment(home), PYTHONHOME="/nonexistent"), spec.flags, None, 60)
    try:
        with pytest.raises(ForkServerError, match="(?s)fork server.*exit code 1.*encodings"):   # its stderr's tail
            StartedWorker(spec, server)
    finally:
        server.close()


def test_a_server_that_cannot_fork_is_given_up_and_workers_start_as_new_processes(
        cpu_config: EvalConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real server whose interpreter cannot start: the evaluator warns once, says why, and goes on
    with workers started as new processes (the same verdicts, slower), never asking that server again."""
    class Unstartable(ForkServer):
        def __init__(self, environment, *args) -> None:  # noqa: ANN001
            super().__init__(lambda home: dict(environment(home), PYTHONHOME="/nonexistent"), *args)

    monkeypatch.setattr(standby, "ForkServer", Unstartable)
    evaluator = Evaluator(cpu_config)
    with pytest.warns(RuntimeWarning, match="(?s)new processes.*fork server.*encodings"):
        m = evaluator.evaluate(get_task(TASK), _honest())
    assert m.correct and m.extra["forked"] is False, m.detail[-1500:]
    again = evaluator.evaluate(get_task(TASK), _honest())
    assert again.correct and again.extra["forked"] is False
    assert len(evaluator.standby._servers) == 1     # the first one, never started again
    evaluator.close()


def test_a_server_without_nvml_loaded_has_nothing_to_release() -> None:
    """`_release_nvml` shuts NVML down only where the imports loaded it (a GPU host); here none is."""
    from rl_kernels.evaluation.forkserver import _release_nvml

    assert "libnvidia-ml" not in Path("/proc/self/maps").read_text()
    assert _release_nvml() == 0
