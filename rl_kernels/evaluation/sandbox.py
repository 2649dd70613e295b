"""Runs one evaluation job in a fresh, confined subprocess and reads back its verdict.

Isolation (DESIGN.md protocol step 1): own process (so its own CUDA context), own scratch dir as
cwd/HOME/TMPDIR and the only writable place, scrubbed environment, wall timeout, memory and
file-size limits; under `isolation: namespaces` also no network, a read-only host with its secrets
hidden and a PID namespace that takes every process down with the worker (`confine.py`); the worker
itself installs a seccomp filter before it loads the candidate.  A crash, hang, illegal address or
OOM costs only this job: the caller simply starts the next one.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_kernels.config import SandboxConfig
from rl_kernels.evaluation import compile_cache, confine
from rl_kernels.evaluation.reasons import Reason

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
    hung_after_s: float | None = None   # the watchdog's silence limit, when it was the watchdog that fired
    phase_s: dict[str, float] = field(default_factory=dict)   # seconds spent in each phase, "start" = process start

    def failure(self) -> tuple[Reason, str] | None:
        """The reason this run produced no usable verdict, if it did not."""
        if self.hung_after_s is not None:
            return Reason.TIMEOUT, (f"a candidate call did not return: no progress for {self.hung_after_s:.1f} s "
                                    f"in phase {self.last_phase} (killed after {self.seconds:.1f} s)")
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


def _limits(memory_mb: int, backend: str) -> Any:
    def apply() -> None:
        # Die with the parent: a killed timer must not leave a hung candidate spinning on the device.
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
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


class _Progress:
    """What the worker said so far, and when it last said anything (read by the watchdog)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.last_at = time.monotonic()
        self.watched = False      # the candidate is loaded: silence now means a call that never returned
        self.marks: list[tuple[str, float]] = [("start", self.last_at)]   # (phase, when it began)

    def read(self, fd: int) -> None:
        with os.fdopen(fd, "r") as f:
            for line in f:
                self.lines.append(line)
                self.last_at = time.monotonic()
                self.watched = self.watched or any(p in line for p in _WATCHED_PHASES)
                if line.startswith('{"phase"'):
                    self._mark(line)

    def _mark(self, line: str) -> None:
        """Notes when a phase began; a malformed line (candidate code can write here too) is ignored."""
        try:
            name = json.loads(line)["phase"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(name, str) and len(self.marks) < 64:
            self.marks.append((name[:32], self.last_at))

    def phase_seconds(self, end: float) -> dict[str, float]:
        """Where the worker's time went: each phase's seconds until the next began (or `end`)."""
        ends = [t for _, t in self.marks[1:]] + [end]
        spent: dict[str, float] = {}
        for (name, began), ended in zip(self.marks, ends):
            spent[name] = round(spent.get(name, 0.0) + ended - began, 3)
        return spent


def _wait(proc: subprocess.Popen, progress: _Progress, timeout_s: float, watchdog_s: float | None) -> str | None:
    """Waits for the worker; "timeout" past the job's wall limit, "hung" after `watchdog_s` of silence
    once candidate code runs, None when it ended by itself."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            proc.wait(timeout=0.1)
            return None
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now > deadline:
            return "timeout"
        if watchdog_s is not None and progress.watched and now - progress.last_at > watchdog_s:
            return "hung"


def worker_command(cmd: list[str], scratch: Path, readable: list[str], cfg: SandboxConfig,
                   hidden: list[str] = (), writable: list[str] = ()) -> list[str]:
    """`cmd` as it runs under the configured isolation (the scratch dir and `writable` its only
    writable places; `hidden` are places beyond the fixed secret ones that it must not see, e.g. the
    build cache)."""
    if cfg.isolation == "process":
        return cmd
    conf = confine.Confinement(readable=[*confine.python_paths(), *readable],
                               writable=[str(scratch), *writable], hide=confine.hidden_places(list(hidden)))
    return confine.confined_argv(cmd, conf)


def run_job(job: dict[str, Any], artifact: bytes | None, artifact_name: str, backend: str,
            cfg: SandboxConfig, threads: int | None = None, readable: list[str] = (),
            hidden: list[str] = (), kept: compile_cache.KeptCompile | None = None) -> SandboxResult:
    """Runs `job` in a fresh worker; `readable` are host paths it may read besides Python and torch,
    `hidden` places it must not see (under namespaces), `kept` the task's kept compile caches (seeded
    into their work dir, and given what the worker listed there before candidate code ran)."""
    scratch = Path(tempfile.mkdtemp(prefix="rlk-eval-", dir=cfg.scratch_root)).resolve()
    try:
        extra: dict[str, Any] = {}
        if kept is not None:
            compile_cache.seed(kept.store, kept.workdir)
            extra["compiled_dir"] = str(kept.workdir)
        (scratch / "in").mkdir()
        if artifact is not None:
            (scratch / "in" / artifact_name).write_bytes(artifact)
        job = dict(job, artifact_name=artifact_name, **extra)
        job_path = scratch / "job.json"
        job_path.write_text(json.dumps(job))
        read_fd, write_fd = os.pipe()
        progress = _Progress()
        reader = threading.Thread(target=progress.read, args=(read_fd,), daemon=True)
        stderr_path = scratch / "stderr.txt"
        t0 = time.monotonic()
        with open(stderr_path, "wb") as err:
            cmd = [sys.executable, "-m", "rl_kernels.evaluation.worker", str(job_path), str(write_fd)]
            proc = subprocess.Popen(
                worker_command(cmd, scratch, list(readable), cfg, list(hidden),
                               [str(kept.workdir)] if kept else []),
                cwd=scratch, env=environment(scratch, threads, kept.workdir if kept else None,
                                                keep_freed_memory=cfg.keep_freed_memory),
                stdin=subprocess.DEVNULL,
                stdout=err, stderr=err, pass_fds=(write_fd,), start_new_session=True,
                preexec_fn=_limits(cfg.memory_limit_mb, backend),
            )
        os.close(write_fd)
        reader.start()
        stopped = _wait(proc, progress, cfg.timeout_s, job.get("watchdog_s"))
        timed_out = stopped is not None
        leftover = _kill_group(proc.pid)
        proc.wait()
        reader.join(timeout=5)
        seconds = time.monotonic() - t0
        payload, phase, listing = _parse(progress.lines)
        if kept is not None:
            compile_cache.harvest(kept.store, kept.workdir, listing)
        tail = stderr_path.read_text(errors="replace")[-4000:]
        if proc.returncode == confine.STAGE_FAILED and phase == "start" and payload is None:
            raise confine.ConfinementError(f"the sandbox could not be set up: {tail.strip()[-600:]}")
        return SandboxResult(payload, proc.returncode, timed_out, phase, seconds, tail,
                             leftover and not timed_out, job.get("watchdog_s") if stopped == "hung" else None,
                             progress.phase_seconds(t0 + seconds))
    finally:
        if not cfg.keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if kept is not None:
            shutil.rmtree(kept.workdir, ignore_errors=True)


def _kill_group(pgid: int) -> bool:
    """Kill everything left in the job's process group; True if anything besides the leader was alive."""
    leftover = False
    try:
        for pid_dir in Path("/proc").iterdir():
            if pid_dir.name.isdigit() and int(pid_dir.name) != pgid:
                try:
                    if os.getpgid(int(pid_dir.name)) == pgid:
                        leftover = True
                except ProcessLookupError:
                    continue
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
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
