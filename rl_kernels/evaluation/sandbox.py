"""Runs one evaluation job in a fresh, confined subprocess and reads back its verdict.

Isolation (DESIGN.md protocol step 1): own process (so its own CUDA context), own scratch dir as
cwd/HOME/TMPDIR and the only writable place, scrubbed environment, wall timeout, memory and
file-size limits; under `isolation: namespaces` also no network, a read-only host with its secrets
hidden and a PID namespace that takes every process down with the worker (`confine.py`); the worker
itself installs a seccomp filter before it loads the candidate.  A crash, hang, illegal address or
OOM costs only this job: the caller simply starts the next one.

A worker can be started before its job (`StartedWorker`, kept by `standby.Standby`): it imports
Python, torch and the evaluator's modules and then waits for `go`; the job's files are written into
its scratch dir and `go` is sent when the job arrives.  A job without a started worker starts one
and sends `go` at once: one code path either way.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rl_kernels.config import SandboxConfig
from rl_kernels.evaluation import compile_cache, confine
from rl_kernels.evaluation.reasons import Reason

if TYPE_CHECKING:   # forkserver uses this module's process helpers
    from rl_kernels.evaluation.forkserver import ForkedProcess, ForkServer

_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
             "PYTHONPATH", "CUDA_HOME", "CUDA_PATH", "RL_KERNELS_CACHE", "NCCL_NVLS_ENABLE",
             "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


@dataclass
class SandboxResult:
    payload: dict[str, Any] | None
    returncode: int | None
    timed_out: bool
    last_phase: str
    seconds: float
    stderr_tail: str = ""
    leftover_processes: bool = False
    hang: dict[str, Any] | None = None   # when the watchdog fired: `Watchdog.hang`'s record of the silence
    phase_s: dict[str, float] = field(default_factory=dict)   # seconds spent in each phase from `go`; "start" until the first phase line
    worker: str = "fresh"                  # "standby" (started before the job) or "fresh" (started for it)
    prestart_s: float | None = None        # a standby's start until ready (spawn and imports), paid before the job
    forked: bool = False                   # the worker was forked from a fork server (else started as a new process)
    ahead: dict[str, Any] | None = None    # the problem a standby made before its job: task, seconds, error

    def failure(self) -> tuple[Reason, str] | None:
        """The reason this run produced no usable verdict, if it did not."""
        if self.hang is not None:
            h = self.hang
            return Reason.HUNG, (
                f"a candidate call did not return: no sign of life for {h['silent_s']:.1f} s in phase {h['phase']} "
                f"with {h['calls']} candidate call(s) in flight, allowed {h['limit_s']:.1f} s (hang_floor_s "
                f"{h['floor_s']:g} s + {h['calls']} x {h['per_call_s'] * 1e3:.3g} ms, hang_factor x the baseline's "
                f"median per call); killed after {self.seconds:.1f} s")
        if self.timed_out:
            return Reason.TIMEOUT, f"no result within the time limit (phase {self.last_phase})"
        if self.leftover_processes:
            return Reason.PROCESS_SPAWN, "the candidate left processes running"
        if self.payload is None:
            rc = self.returncode
            if rc is not None and rc < 0:
                reason, detail = killed_by(-rc, f"the worker (phase {self.last_phase})")
                return reason, detail if reason != Reason.CRASH else f"{detail}: {self.stderr_tail[-500:]}"
            return Reason.CRASH, f"exit code {rc} without a result in phase {self.last_phase}: {self.stderr_tail[-800:]}"
        return None


def killed_by(sig: int, who: str) -> tuple[Reason, str]:
    """Why a confined process (`who`) that a signal killed produced no result."""
    if sig == signal.SIGSYS:
        return Reason.SANDBOX_VIOLATION, (
            f"{who} was killed by the seccomp filter: a forbidden system call (fork/exec, ptrace, a network "
            "socket, a SIGSEGV/SIGBUS handler, mount or namespace calls)")
    if sig == signal.SIGKILL:
        return Reason.OUT_OF_MEMORY, f"{who} was killed by SIGKILL (memory limit?)"
    return Reason.CRASH, f"{who} died of {signal.Signals(sig).name}"


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when its parent (the thread that started it) ends."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def limits(memory_mb: int, backend: str) -> Callable[[], None]:
    """What a worker process sets on itself before anything else (a new one in `preexec_fn`, a
    forked one right after the fork)."""
    def apply() -> None:
        # Die with the parent: a killed timer must not leave a hung candidate spinning on the device.
        die_with_parent()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 30, 2 << 30))
        if backend == "cpu":
            # CUDA reserves huge virtual ranges, so an address-space cap only works without it.
            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def environment(scratch: Path, threads: int | None, compile_dir: Path | None = None, *,
                keep_freed_memory: bool = False) -> dict[str, str]:
    """The whole environment of a confined step: nothing of the caller's but what the step needs
    (torch.compile's caches under `compile_dir`, by default the scratch dir; with `keep_freed_memory`
    glibc's malloc never returns freed memory to the OS, so repeated calls reuse it)."""
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    inductor, triton = compile_cache.CACHE_DIRS
    compile_dir = compile_dir or scratch
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONDONTWRITEBYTECODE="1",
               PYTHONHASHSEED="0", TORCHINDUCTOR_CACHE_DIR=str(compile_dir / inductor),
               TRITON_CACHE_DIR=str(compile_dir / triton))
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # torch.compile (a baseline) compiles in this process instead of a pool of worker processes
    # that would outlive the evaluation and read as processes the candidate left running.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    if keep_freed_memory:
        # A fixed mmap threshold above any tensor stops glibc's dynamic one (allocations come from
        # the heap and are reused), and an unreachable trim threshold keeps the heap's top.
        env["MALLOC_MMAP_THRESHOLD_"] = str(2**32)
        env["MALLOC_TRIM_THRESHOLD_"] = str(2**36)
    return env


_WATCHED_PHASES = ('"load"', '"correctness"', '"timing"')   # candidate code runs from "load" on
TIMED_PHASES = ("baselines", "timing")    # the worker's phases in which it times calls
READY_LINE = '{"ready": 1}\n'            # the worker's imports are done; it waits for `go`


@dataclass(frozen=True)
class Watchdog:
    """How long a worker whose candidate is loaded may stay silent: `floor_s` plus `per_call_s` (the
    slowest call still measured: `hang_factor` times the baseline's median) for every candidate call
    that its last line said may run before its next one.  A heartbeat line names those calls
    (`worker.Reporter.beat`: a window of timed calls, a queued batch, one correctness call); any
    other line counts as one (the load, the judge's own checks between calls).  So a hang is
    reported the floor after the work in flight should have ended, at the slowest speed still
    measured, whichever phase it is in."""

    floor_s: float
    per_call_s: float

    def limit_s(self, calls: int) -> float:
        """Seconds of silence allowed while `calls` candidate calls may be running."""
        return self.floor_s + self.per_call_s * calls

    def hang(self, progress: _Progress, now: float) -> dict[str, Any] | None:
        """The record of a silence past its limit (None while within it)."""
        silent, calls = now - progress.last_at, progress.calls
        if not progress.watched or silent <= self.limit_s(calls):
            return None
        return {"silent_s": round(silent, 3), "limit_s": round(self.limit_s(calls), 3), "calls": calls,
                "floor_s": self.floor_s, "per_call_s": self.per_call_s, "phase": progress.marks[-1][0]}


_BEAT = '{"beat": '


def _declared_calls(line: str) -> int:
    """The candidate calls a heartbeat line says may run before the next line; 1 for any other line
    (or a malformed one: under the shared boundary candidate code can write here too, and gains
    nothing by it, the job's wall limit still holds)."""
    if not line.startswith(_BEAT):
        return 1
    try:
        calls = json.loads(line)["beat"]
    except (ValueError, KeyError, TypeError):
        return 1
    return calls if isinstance(calls, int) and calls >= 1 else 1


class _Progress:
    """What the worker said so far, and when it last said anything (read by the watchdog)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.last_at = time.monotonic()
        self.calls = 1            # candidate calls the last line said may run before the next (`Watchdog`)
        self.watched = False      # the candidate is loaded: silence now means a call that never returned
        self.marks: list[tuple[str, float]] = [("start", self.last_at)]   # (phase, when it began)
        self.ready = threading.Event()   # the worker finished its imports and waits for its job
        self.ready_at: float | None = None
        self.ahead: dict[str, Any] | None = None   # what the worker said it made ahead (`worker.problem_ahead`)
        self.on_phase: Callable[[str], None] | None = None   # called (in the reader thread) as each phase begins
        self._lock = threading.Lock()

    def read(self, fd: int) -> None:
        with os.fdopen(fd, "r") as f:
            for line in f:
                with self._lock:
                    self.lines.append(line)
                    self.last_at = time.monotonic()
                    self.calls = _declared_calls(line)
                    self.watched = self.watched or any(p in line for p in _WATCHED_PHASES)
                    if line.startswith('{"phase"'):
                        self._mark(line)
                    elif line.endswith('"final": true}\n') and len(self.marks) < 64:
                        self.marks.append(("teardown", self.last_at))   # the verdict is in: the rest is the exit
                    elif line == READY_LINE and not self.ready.is_set():
                        self.ready_at = self.last_at
                        self.ready.set()
                    elif line.startswith('{"ahead"') and not self.ready.is_set():   # no candidate has run yet
                        self.ahead = _ahead(line)

    def begin(self, at: float) -> None:
        """The job starts now: what the worker said while it waited for it is not the job's."""
        with self._lock:
            self.lines = [ln for ln in self.lines if ln != READY_LINE and not ln.startswith('{"ahead"')]
            self.last_at = at
            self.marks = [("start", at)]

    def _mark(self, line: str) -> None:
        """Notes when a phase began; a malformed line (candidate code can write here too) is ignored."""
        try:
            name = json.loads(line)["phase"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(name, str) and len(self.marks) < 64:
            self.marks.append((name[:32], self.last_at))
            if self.on_phase is not None:
                self.on_phase(name)

    def phase_seconds(self, end: float) -> dict[str, float]:
        """Where the worker's time went: each phase's seconds until the next began (or `end`)."""
        ends = [t for _, t in self.marks[1:]] + [end]
        spent: dict[str, float] = {}
        for (name, began), ended in zip(self.marks, ends):
            spent[name] = round(spent.get(name, 0.0) + ended - began, 3)
        return spent


def _ahead(line: str) -> dict[str, Any] | None:
    """The worker's `ahead` line: the task it made a problem for, the seconds, the error if any."""
    try:
        done = json.loads(line)["ahead"]
        return {"task": str(done["task"]), "seconds": float(done["seconds"]),
                "error": None if done["error"] is None else str(done["error"])[-500:]}
    except (ValueError, KeyError, TypeError):
        return None


WATCH_EVERY_S = 0.1   # how often the parent looks at the worker: a hang is reported at most this late


def _wait(proc: subprocess.Popen, progress: _Progress, timeout_s: float,
          watchdog: Watchdog | None) -> tuple[str | None, dict[str, Any] | None]:
    """Waits for the worker: ("timeout", None) past the job's wall limit, ("hung", its record) once
    candidate code runs and stays silent past the `watchdog`'s limit, (None, None) when it ended by
    itself."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            proc.wait(timeout=WATCH_EVERY_S)
            return None, None
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now > deadline:
            return "timeout", None
        hang = watchdog.hang(progress, now) if watchdog is not None else None
        if hang is not None:
            return "hung", hang


def confinement(scratch: Path, readable: Sequence[str], hidden: Sequence[str] = (),
                writable: Sequence[str] = ()) -> confine.Confinement:
    """What a confined step may see: the scratch dir and `writable` its only writable places;
    `hidden` are places beyond the fixed secret ones that it must not see, e.g. the build cache."""
    return confine.Confinement(readable=[*confine.python_paths(), *readable],
                               writable=[str(scratch), *writable], hide=confine.hidden_places(list(hidden)))


def worker_command(cmd: list[str], scratch: Path, readable: list[str], cfg: SandboxConfig,
                   hidden: list[str] = (), writable: list[str] = (),
                   aliases: Sequence[Sequence[str]] = ()) -> list[str]:
    """`cmd` as it runs under the configured isolation (see `confinement`; `aliases` as in
    `confine.Confinement`)."""
    if cfg.isolation == "process":
        return cmd
    conf = confinement(scratch, readable, hidden, writable)
    conf.aliases = [list(pair) for pair in aliases]
    return confine.confined_argv(cmd, conf)


# How a worker starts: its working directory is its scratch dir, which the candidate can write, and
# `python -m` would put that first on sys.path, ahead of the standard library; a module planted
# there under the name of one the judge imports later would run in the judge.  So the worker's
# module is run from `-c`, with the working directory taken off sys.path before anything is imported.
WORKER_BOOT = ("import os, sys; sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]; "
               "import runpy; runpy.run_module('rl_kernels.evaluation.worker', run_name='__main__', alter_sys=True)")


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process is started with before its job is known; a started worker serves a
    job whose spec is equal (`standby.Standby`)."""

    backend: str
    cfg: SandboxConfig
    threads: int | None = None
    readable: tuple[str, ...] = ()        # host paths it may read besides Python and torch
    hidden: tuple[str, ...] = ()          # places it must not see (under namespaces), e.g. the build cache
    compile_dir: Path | None = None       # the kept compile caches' work dir (None: compile in the scratch dir)
    warm_compile: bool = False            # import torch.compile's modules before the job
    dispatch_tools: bool = False          # import what the ATen-op audit and the profiler need before the job
    device_ahead: bool = False            # create the CUDA contexts (and the cuBLAS handle) before the job

    @property
    def flags(self) -> list[str]:
        """The worker's command-line flags (also what a fork server imports for it)."""
        return [*(["--split"] if self.cfg.boundary == "split" else []), *(["--warm-compile"] if self.warm_compile else []),
                *(["--dispatch-tools"] if self.dispatch_tools else []),
                *(["--device-ahead"] if self.device_ahead else [])]

    @property
    def server_key(self) -> tuple[Any, ...]:
        """What a fork server's workers share, fixed when the server starts: its imports, and the
        environment read as libraries load (OpenMP's threads, glibc's malloc settings)."""
        return (self.threads, self.cfg.keep_freed_memory, tuple(self.flags))

    def environment(self, scratch: Path) -> dict[str, str]:
        """The whole environment of a worker in `scratch`."""
        return environment(scratch, self.threads, self.compile_dir, keep_freed_memory=self.cfg.keep_freed_memory)


@dataclass(frozen=True)
class Prime:
    """The task a started worker makes its problem for before its job (`eval.sandbox.prestart_problem`):
    the task of the job that was running when it started, the likeliest next one.  Only the
    evaluator's own data: the task, its config, backend and baselines (`job`: the fields of a job
    that `worker.problem_ahead` reads), and the task's kept compile caches (`store`, copied into
    the worker's own compile dir); no candidate, no seed, no job file."""

    job: dict[str, Any]
    store: Path | None = None

    @property
    def task(self) -> str:
        """The id of the task the worker makes its problem for."""
        return str(self.job["task"]["id"])


PRIME_FILE = "prime.json"   # in a started worker's scratch dir: the `Prime.job` it makes its problem for


class StartedWorker:
    """A worker process in its own scratch dir, started and importing (then waiting) before its job.

    Started as a new process (`python -c WORKER_BOOT` under the configured isolation), or forked
    from `server` (`forkserver.ForkServer`, same isolation, set up after the fork).
    It holds nothing of any job until `run_job` writes the job's files and sends `go`; `discard`
    ends it unused.  Closing the go pipe (also by this process dying) makes it exit by itself.
    With a `prime` it makes that task's problem and calls its baselines once before it says ready
    (`worker.problem_ahead`): trusted code only, on a seed of its own.
    Started beside a running job, it is stopped (SIGSTOP) while that job times calls, if it is
    still importing (or creating its CUDA contexts, `WorkerSpec.device_ahead`, or making its
    problem) then, and continued when that job ends (`pause`, `resume`).

    Under namespaces the worker compiles in a directory of its own (`compile_dir`, in its scratch
    dir) bound where the kept caches' fixed work dir is (`WorkerSpec.compile_dir`, the path inductor
    remembers): what one candidate writes there is never read by another worker, and a worker
    making its problem ahead reads caches that only the evaluator wrote.  Under `process` isolation
    every worker compiles in the fixed work dir itself, and no worker makes a problem that compiles
    there ahead (`prime` is then refused).
    """

    def __init__(self, spec: WorkerSpec, server: ForkServer | None = None, prime: Prime | None = None) -> None:
        self.spec = spec
        own_dir = spec.compile_dir is not None and spec.cfg.isolation == "namespaces"
        if prime is not None and spec.compile_dir is not None and not own_dir:
            raise ValueError("a worker without a compile dir of its own (isolation process) cannot make a "
                             "problem that compiles ahead: it would read the running job's compile dir")
        self.scratch = Path(tempfile.mkdtemp(prefix="rlk-eval-", dir=spec.cfg.scratch_root)).resolve()
        self.compile_dir = self.scratch / "compile" if own_dir else spec.compile_dir
        self.prime = prime
        aliases: list[list[str]] = []
        if spec.compile_dir is not None:
            spec.compile_dir.mkdir(parents=True, exist_ok=True)   # bound into the namespace now
        if own_dir:
            assert self.compile_dir is not None and spec.compile_dir is not None
            self.compile_dir.mkdir()
            aliases.append([str(self.compile_dir), str(spec.compile_dir)])
        if prime is not None:
            if prime.store is not None and self.compile_dir is not None:
                compile_cache.seed(prime.store, self.compile_dir)
            (self.scratch / PRIME_FILE).write_text(json.dumps(prime.job))
        read_fd, write_fd = os.pipe()
        go_read, self._go = os.pipe()
        self.progress = _Progress()
        self.started_at = self.progress.last_at
        self.paused_s = 0.0                 # time it spent stopped beside a timed job
        self._paused_at: float | None = None
        self._pause_lock = threading.Lock()
        self.reader = threading.Thread(target=self.progress.read, args=(read_fd,), daemon=True)
        self.forked = server is not None
        writable = [str(spec.compile_dir)] if spec.compile_dir and not own_dir else []
        try:
            with open(self.scratch / "stderr.txt", "wb") as err:
                if server is not None:
                    # In its namespace the worker's scratch dir is also where the server imported:
                    # every path an import remembered (working dir, $HOME, $TMPDIR) is the worker's own.
                    conf = confinement(self.scratch, spec.readable, spec.hidden, writable)
                    conf.aliases = [[str(self.scratch), str(server.home)], *aliases]
                    self.proc: subprocess.Popen | ForkedProcess = server.fork(
                        {"scratch": str(self.scratch), "home": str(server.home), "env": spec.environment(server.home),
                         "job_path": str(server.home / "job.json"), "flags": spec.flags, "backend": spec.backend,
                         "memory_limit_mb": spec.cfg.memory_limit_mb, "confinement": asdict(conf)}, write_fd, go_read)
                else:
                    cmd = [sys.executable, "-c", WORKER_BOOT, str(self.job_path), str(write_fd), str(go_read), *spec.flags]
                    self.proc = subprocess.Popen(
                        worker_command(cmd, self.scratch, list(spec.readable), spec.cfg, list(spec.hidden), writable,
                                       aliases),
                        cwd=self.scratch, env=spec.environment(self.scratch),
                        stdin=subprocess.DEVNULL, stdout=err, stderr=err, pass_fds=(write_fd, go_read),
                        start_new_session=True, preexec_fn=limits(spec.cfg.memory_limit_mb, spec.backend),
                    )
        except BaseException:
            for fd in (read_fd, self._go):
                os.close(fd)
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            os.close(write_fd)
            os.close(go_read)
        self.reader.start()

    @property
    def job_path(self) -> Path:
        return self.scratch / "job.json"

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the worker has imported everything and waits for its job, False if it died
        first or is still not ready after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not self.progress.ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
        return self.proc.poll() is None

    def pause(self) -> None:
        """Stops the worker if it is still getting ready (a ready one only waits on a pipe)."""
        with self._pause_lock:
            if self._paused_at is None and not self.progress.ready.is_set() and self.proc.poll() is None:
                signal_group(self.proc.pid, signal.SIGSTOP)
                self._paused_at = time.monotonic()

    def resume(self) -> None:
        """Continues a stopped worker."""
        with self._pause_lock:
            if self._paused_at is not None:
                signal_group(self.proc.pid, signal.SIGCONT)
                self.paused_s += time.monotonic() - self._paused_at
                self._paused_at = None

    def go(self) -> float:
        """Lets the worker read its job (its files must be in place); returns when."""
        at = time.monotonic()
        self.progress.begin(at)
        try:
            os.write(self._go, b"go")
        except BrokenPipeError:
            pass   # it died while waiting: run_job reports it from the exit status
        os.close(self._go)
        self._go = -1
        return at

    def discard(self) -> None:
        """Ends the worker unused and removes its scratch dir."""
        if self._go >= 0:
            os.close(self._go)    # it exits by itself on end of file ...
            self._go = -1
        _kill_group(self.proc.pid)  # ... and now at once, with anything it started
        self.proc.wait()
        self.reader.join(timeout=5)
        if not self.spec.cfg.keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _pause_all(workers: Sequence[StartedWorker]) -> None:
    for worker in workers:
        worker.pause()


def run_job(job: dict[str, Any], artifact: bytes | None, artifact_name: str, spec: WorkerSpec,
            kept: compile_cache.KeptCompile | None = None, worker: StartedWorker | None = None,
            beside: Sequence[StartedWorker] = (),
            start: Callable[[WorkerSpec], StartedWorker] | None = None) -> SandboxResult:
    """Runs `job` in `worker` (started for `spec` before the job) or in one `start` gives now
    (`Standby.start`: forked from the fork server when there is one; by default a new process);
    `kept` are the task's kept compile caches (seeded into the worker's compile dir unless it made
    its problem ahead from the same ones, and given what the worker listed there before candidate
    code ran); `beside` are the next jobs' workers, starting while this job runs: each is stopped
    from this job's first timed phase until this job ends, if still getting ready."""
    assert kept is None or kept.workdir == spec.compile_dir, "the kept caches' work dir is the spec's"
    standby = worker is not None
    worker = worker or (start or StartedWorker)(spec)
    cfg = spec.cfg
    scratch = worker.scratch
    workdir = worker.compile_dir
    try:
        extra: dict[str, Any] = {}
        if kept is not None:
            assert workdir is not None
            if worker.prime is None or worker.prime.store != kept.store:
                compile_cache.seed(kept.store, workdir)   # else: what the worker's own problem left there
            extra["compiled_dir"] = str(kept.workdir)     # the path the worker sees it at
        (scratch / "in").mkdir()
        if artifact is not None:
            (scratch / "in" / artifact_name).write_bytes(artifact)
        job = dict(job, artifact_name=artifact_name, **extra)
        worker.job_path.write_text(json.dumps(job))
        proc, progress = worker.proc, worker.progress
        if beside:
            progress.on_phase = lambda name: _pause_all(beside) if name in TIMED_PHASES else None
        t0 = worker.go()
        watchdog = Watchdog(**job["watchdog"]) if job.get("watchdog") else None
        stopped, hang = _wait(proc, progress, cfg.timeout_s, watchdog)
        timed_out = stopped is not None
        leftover = _kill_group(proc.pid)
        proc.wait()
        worker.reader.join(timeout=5)
        seconds = time.monotonic() - t0
        payload, phase, listing = _parse(progress.lines)
        if kept is not None:
            assert workdir is not None
            compile_cache.harvest(kept.store, workdir, listing)
        tail = (scratch / "stderr.txt").read_text(errors="replace")[-4000:]
        if proc.returncode == confine.STAGE_FAILED and phase == "start" and payload is None:
            raise confine.ConfinementError(f"the sandbox could not be set up: {tail.strip()[-600:]}")
        prestart = round(progress.ready_at - worker.started_at, 3) if standby and progress.ready_at else None
        return SandboxResult(payload, proc.returncode, timed_out, phase, seconds, tail,
                             leftover and not timed_out, hang,
                             progress.phase_seconds(t0 + seconds), "standby" if standby else "fresh", prestart,
                             worker.forked, progress.ahead)
    finally:
        if beside:
            worker.progress.on_phase = None
            for other in beside:
                other.resume()
        if not cfg.keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if kept is not None and workdir == kept.workdir:
            compile_cache.empty(kept.workdir)


def signal_group(pgid: int, sig: int) -> None:
    """Sends `sig` to process group `pgid`, if it still exists (and is still this user's)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> set[int]:
    """The pids of the processes in process group `pgid` (a zombie counts until it is reaped)."""
    pids = set()
    for pid_dir in Path("/proc").iterdir():
        try:
            if pid_dir.name.isdigit() and os.getpgid(int(pid_dir.name)) == pgid:
                pids.add(int(pid_dir.name))
        except OSError:
            continue
    return pids


def _kill_group(pgid: int) -> bool:
    """Kill everything left in the job's process group; True if anything besides the leader was alive."""
    leftover = bool(group_members(pgid) - {pgid})
    signal_group(pgid, signal.SIGKILL)
    return leftover


def _parse(lines: list[str]) -> tuple[dict[str, Any] | None, str, dict[str, str]]:
    """The worker's verdict, its last phase, and its listing of the compile caches: the listing only
    from before the candidate was loaded (a line after that could come from candidate code)."""
    phase = "start"
    payload = None
    listing: dict[str, str] | None = None
    loaded = False
    for line in lines:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("final"):
            payload = msg
        elif "phase" in msg:
            phase = msg["phase"]
            loaded = loaded or phase == "load"
        elif isinstance(msg.get("compiled"), dict) and not loaded and listing is None:
            listing = {str(k): str(v) for k, v in msg["compiled"].items()}
    return payload, phase, listing or {}
