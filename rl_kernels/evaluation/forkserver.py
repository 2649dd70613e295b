"""A fork server: one trusted process that imported what every evaluation worker needs, and forks
a worker for each job (started with `--capture`: what a module build's capture step needs, forking
one confined capture per candidate, `build._capture_server`).

Why: a worker started as a new process imports Python, torch and, for a compiled baseline,
torch.compile's modules for itself: 12-14 s of a core on the H200 host (docs/EVALUATOR.md, run 15),
more than a job takes, so no number of workers started ahead keeps up with a fast timer.  The server
pays that once; a fork costs milliseconds and shares the imported pages copy-on-write.  On a host
without a visible CUDA device it also runs torch.compile once (`worker.warm_compiler`); where a
device is visible it does not, because a compile there initialises the CUDA driver (dynamo saves the
CUDA RNG state around it) and a worker forked after that could not use the device.

What a forked worker gets is what a worker started as a new process gets (`sandbox.StartedWorker`),
set up in the child after the fork and before anything of a job exists: its own session and process
group; its stdio on its scratch dir's stderr.txt; every inherited file descriptor closed but its two
pipes (nothing it runs can reach the server's socket); the rlimits; an environment naming its own
scratch dir and nothing else of the caller's; and the stage's confinement (`confine.enter_namespaces`,
then `confine.confine_forked` in pid 1 of the new PID namespace: user, mount, network, IPC and UTS
namespaces, read-only host with the secrets hidden, its scratch dir the only writable place, no
capabilities).  Imports remember paths (torch.compile's debug dir under the working dir, inductor's
header cache under $TMPDIR): in its mount namespace the worker's scratch dir is bound a second time
where the server imported (`Confinement.aliases`), and the worker works there, so each of those
paths is its own.  That needs the mount namespace: under `isolation: process` there is no fork
server, and each worker is a new process.  The server never touches the device, never
reads a job file, never runs candidate code and never installs the audit hook or the seccomp filter:
what a worker inherits from it is what the imports made, the same in every fork.  One forked process
serves one job and is then discarded, as before.

Protocol (a private SOCK_SEQPACKET socket pair, JSON messages): the server says `ready` once its
imports are done; each `fork` request carries the worker's settings and its two pipe ends (progress
out, go in) as passed descriptors and is answered `forked` with the child's pid; `exited` reports a
child's exit status (the server is its parent and reaps it).  The server exits when the socket
closes, and dies with the process that started it; its children die with it.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

from rl_kernels.evaluation import confine
from rl_kernels.evaluation.sandbox import die_with_parent, limits, signal_group

_MAX_MESSAGE = 1 << 20


class ForkServerError(RuntimeError):
    """The fork server could not start, or died; the message says why."""


class ForkedProcess:
    """A worker forked by the server, with the part of `subprocess.Popen` the sandbox uses:
    `pid` (also its process group), `poll`, `wait`, `returncode` (negative: killed by that signal)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


# How the server starts: like a worker (sandbox.WORKER_BOOT), with its working dir off sys.path.
SERVER_BOOT = ("import os, sys; sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]; "
               "import runpy; runpy.run_module('rl_kernels.evaluation.forkserver', run_name='__main__', alter_sys=True)")


class ForkServer:
    """The evaluator's side of one fork server: start it, fork workers from it, close it.

        server = ForkServer(spec.environment, spec.flags, scratch_root, ready_s)
        proc = server.fork(settings, progress_w, go_r)    # blocks until the server's imports are done
        ...
        server.close()                                     # ends the server and any worker it forked

    `flags` say what the workers will need (`--warm-compile`, `--dispatch-tools`): the server imports it.
    """

    def __init__(self, environment: Callable[[Path], dict[str, str]], flags: list[str], root: Path | None,
                 ready_s: float) -> None:
        """`environment(dir)`: the environment of a process whose scratch dir is `dir` (the server's
        own is a private dir under `root`)."""
        self.flags = list(flags)
        self.ready_s = ready_s
        self.home = Path(tempfile.mkdtemp(prefix="rlk-forkserver-", dir=root)).resolve()
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()          # one request in flight at a time
        self._replies: list[dict[str, Any]] = []
        self._replied = threading.Condition()
        self._children: dict[int, ForkedProcess] = {}
        self._ready = threading.Event()
        self._gone: str | None = None
        # torch.cuda.is_available() (which torch.compile's imports call) asks NVML instead of
        # initialising the CUDA driver, which no forked child could use again; the children's own
        # environment goes without it.
        env = dict(environment(self.home), PYTORCH_NVML_BASED_CUDA_CHECK="1")
        try:
            with open(self.home / "stderr.txt", "wb") as err:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", SERVER_BOOT, str(theirs.fileno()), *self.flags], cwd=self.home, env=env,
                    stdin=subprocess.DEVNULL, stdout=err, stderr=err, pass_fds=(theirs.fileno(),),
                    start_new_session=True, preexec_fn=die_with_parent)
        except BaseException:
            self._sock.close()
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        finally:
            theirs.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._gone is None and self.proc.poll() is None

    @property
    def live_children(self) -> int:
        with self._replied:
            return sum(1 for p in self._children.values() if p.returncode is None)

    def fork(self, settings: dict[str, Any], progress_fd: int, go_fd: int) -> ForkedProcess:
        """A worker forked with `settings` (see `_become_worker`), `progress_fd` and `go_fd` its two
        pipe ends (the caller keeps and closes its own copies)."""
        if not self._ready.wait(self.ready_s):
            raise ForkServerError(self._why_gone(f"not ready after {self.ready_s:.0f} s"))
        if not self.alive:
            raise ForkServerError(self._why_gone("it ended"))
        with self._lock:
            try:
                socket.send_fds(self._sock, [json.dumps({"fork": settings}).encode()], [progress_fd, go_fd])
            except OSError as exc:
                raise ForkServerError(self._why_gone(f"cannot send a fork request: {exc}")) from None
            reply = self._next_reply()
        if "error" in reply:
            raise ForkServerError(f"the fork server could not fork a worker: {reply['error']}")
        return reply["process"]

    def close(self) -> None:
        """Ends the server; the workers it forked die with it (and are killed here besides)."""
        with self._replied:
            children = [p for p in self._children.values() if p.returncode is None]
        for child in children:
            signal_group(child.pid, signal.SIGKILL)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=5)
        shutil.rmtree(self.home, ignore_errors=True)

    def _next_reply(self) -> dict[str, Any]:
        with self._replied:
            while not self._replies:
                if self._gone is not None:
                    raise ForkServerError(self._why_gone("it died"))
                self._replied.wait(0.5)
            return self._replies.pop(0)

    def _read(self) -> None:
        """The reader thread: every message the server sends, until it is gone."""
        try:
            while True:
                data = self._sock.recv(_MAX_MESSAGE)
                if not data:
                    break
                msg = json.loads(data)
                with self._replied:
                    if "ready" in msg:
                        self._ready.set()
                    elif "exited" in msg:
                        child = self._children.pop(int(msg["exited"]), None)
                        if child is not None:
                            child.end(int(msg["code"]))
                    else:
                        if "forked" in msg:   # kept in the reply too: it may have exited before fork() reads it
                            msg["process"] = self._children[int(msg["forked"])] = ForkedProcess(int(msg["forked"]))
                        self._replies.append(msg)
                        self._replied.notify_all()
        except (OSError, ValueError):
            pass
        with self._replied:
            self._gone = self._gone or "its socket closed"
            orphans = [p for p in self._children.values() if p.returncode is None]
            self._children.clear()
            self._replied.notify_all()
        self._ready.set()   # whoever waits for it learns that it is gone
        for child in orphans:   # they die with the server anyway (parent-death signal)
            signal_group(child.pid, signal.SIGKILL)
            child.end(-signal.SIGKILL)

    def _why_gone(self, what: str) -> str:
        try:
            code = self.proc.wait(5) if self._gone is not None else self.proc.poll()   # its socket closes as it exits
        except subprocess.TimeoutExpired:
            code = None
        try:
            tail = (self.home / "stderr.txt").read_text(errors="replace")[-800:]
        except OSError:
            tail = ""
        return f"the fork server ({' '.join(self.flags) or 'no flags'}): {what}; exit code {code}; {tail}"


# ----------------------------------------------------------------------------------------------
# the server's side


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode())


# What a server started with `--capture` imports: it forks the capture step of module builds
# (`capture.serve_forked`), which runs a candidate's top level with torch imported.
CAPTURE_IMPORTS = ("torch.utils.cpp_extension", "rl_kernels.evaluation.capture")


def serve(fd: int, flags: list[str]) -> None:
    """The server's life: import, say ready, fork a worker per request, report each one's exit."""
    from rl_kernels.evaluation import worker

    names = (CAPTURE_IMPORTS if "--capture" in flags
             else worker.imports_ahead("--warm-compile" in flags, "--dispatch-tools" in flags))
    for name in names:
        importlib.import_module(name)
    if "--warm-compile" in flags and not worker.cuda_visible():
        try:
            worker.warm_compiler()
        except Exception:  # noqa: BLE001 - a head start only: each worker's baseline compiles without it
            traceback.print_exc()
    _refuse_if_cuda_initialised()
    _release_nvml()
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, {"ready": os.getpid()})
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
            _reap(sock)
        if sock in readable:
            try:
                data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 2)
            except ConnectionError:
                data, fds = b"", []
            if not data:
                return   # the evaluator is gone: its workers die with this process
            _fork(sock, json.loads(data)["fork"], fds)


_CUDA_ERROR_NOT_INITIALIZED = 3


def _refuse_if_cuda_initialised() -> None:
    """Exits (with the reason on stderr) if anything so far initialised the CUDA driver in this
    process: a child forked after that cannot use the device.  The driver is loaded only if
    something asked for it; asked, it answers "not initialised" until cuInit ran."""
    maps = Path("/proc/self/maps").read_text()
    if "libcuda.so" not in maps:
        return
    count = ctypes.c_int(0)
    if ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(count)) != _CUDA_ERROR_NOT_INITIALIZED:
        sys.stderr.write("rl_kernels fork server: something it ran before forking (its imports) initialised the "
                         "CUDA driver, so no worker forked from it could use the device; set "
                         "eval.sandbox.fork_server=false\n")
        sys.exit(1)


_NVML_ERROR_UNINITIALIZED = 1
_NVML_MAX_INITS = 1024   # torch initialises NVML once per device-count query and never shuts it down


def _release_nvml() -> int:
    """Shuts NVML down in this process if its imports initialised it; returns how many of its
    initialisations it undid.

    `torch.cuda.device_count()` asks NVML (torch._dynamo's import asks it, and this server's
    environment makes `torch.cuda.is_available()` ask it), and NVML, once initialised, keeps the
    descriptors of the device files it opened.  A forked worker closes every descriptor it inherits,
    so an NVML it inherited initialised would answer through numbers that now name other files or
    none, and some torch versions ask NVML for the device count even after CUDA is initialised.
    Forked module workers on an H100 host failed their first `get_device_properties(0)` with
    "Invalid device id" (a device count of 0); there, a child forked with NVML inherited could not
    initialise its own, and one forked after this release could (docs/EVALUATOR.md, runs 17-18).
    NVML counts its initialisations; shut down as often, a child initialises its own, as a worker
    started as a new process does."""
    if "libnvidia-ml.so" not in Path("/proc/self/maps").read_text():
        return 0
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    for undone in range(_NVML_MAX_INITS):
        if nvml.nvmlShutdown() == _NVML_ERROR_UNINITIALIZED:
            return undone
    return _NVML_MAX_INITS


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork(sock: socket.socket, settings: dict[str, Any], fds: list[int]) -> None:
    """Forks one worker (it closes every descriptor it inherits but `fds`, see `_become_worker`)."""
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        _send(sock, {"error": f"a fork request needs 2 descriptors, got {len(fds)}"})
        return
    led_r, led_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = confine.STAGE_FAILED   # a forked worker that could not set itself up
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()          # before the server answers: the caller signals the pid as a group
            os.close(led_w)
            _become_worker(settings, fds[0], fds[1])
        except BaseException:   # noqa: BLE001 - whatever went wrong, this child must not return into the server
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(led_w)
    os.read(led_r, 1)            # end of file: the child leads its own session (or died)
    os.close(led_r)
    for fd in fds:
        os.close(fd)
    _send(sock, {"forked": pid})


def _become_worker(settings: dict[str, Any], progress_fd: int, go_fd: int) -> None:
    """In the forked child (already leading its own session): isolate, confine, then serve one job
    (never returns on success): an evaluation worker's, or with `role` "capture" a module build's
    capture step (the candidate's top level at `source_path`, its load_inline calls written to
    `progress_fd` as JSON; `go_fd` unused).

    `settings`: scratch (its scratch dir), home (the server's working dir, where the confinement
    binds the scratch dir a second time and the worker works), env (its whole environment),
    job_path, flags (the worker's), backend, memory_limit_mb, confinement (a `confine.Confinement`
    as a dict), and role / source_path for a capture."""

    scratch = Path(settings["scratch"])
    err = os.open(scratch / "stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(err, 1)
    os.dup2(err, 2)
    keep = {0, 1, 2, progress_fd, go_fd}
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass
    limits(settings["memory_limit_mb"], settings["backend"])()
    os.environ.clear()
    os.environ.update(settings["env"])
    tempfile.tempdir = None
    os.chdir(scratch)
    confine.enter_namespaces()
    pid = os.fork()
    if pid != 0:
        _outlive_nothing(pid, progress_fd, go_fd)
    die_with_parent()
    confine.confine_forked(confine.Confinement(**settings["confinement"]))
    os.chdir(settings["home"])
    if settings.get("role") == "capture":
        from rl_kernels.evaluation import capture

        os.close(go_fd)
        capture.serve_forked(Path(settings["source_path"]), progress_fd)
    from rl_kernels.evaluation import worker

    worker.serve(Path(settings["job_path"]), progress_fd, go_fd, list(settings["flags"]))


def _outlive_nothing(pid: int, *fds: int) -> None:
    """The namespaces' outer process (what `unshare --fork` is for a new process): waits for their
    pid 1, the worker, and ends as it ended (by the same signal, or with the same exit code)."""
    for fd in fds:
        os.close(fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    serve(int(sys.argv[1]), sys.argv[2:])
