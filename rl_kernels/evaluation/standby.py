"""Evaluation workers started ahead of an evaluator's next jobs, and the fork servers they come from.

Starting a worker as a new process costs seconds before it can do anything (process start, `import
torch`, the evaluator's modules, under namespaces the confinement's setup): on the 2-core cpu machine
and the H200 host alike that is a large share of an evaluation.  So workers are forked from a fork
server that imported once (`forkserver`, `eval.sandbox.fork_server`: milliseconds a start), and the
evaluator starts the worker for the next job ahead (`sandbox.StartedWorker`), which waits for its
job once it is ready.
`eval.sandbox.prestart` says when: `beside_job` as the current job starts (it imports while that job
sets up and checks correctness: back to back it has the job's duration to get ready, which is free
where the host has cores to spare), `after_job` when the current job has ended (on a host of two
cores an import beside the job slowed its correctness phase by about what it saved; a timer that
waits for its next candidate still finds the worker ready).

What does not change: one process serves one job and is then discarded (a crash, hang or corrupted
context of one candidate never reaches the next); the started worker reads no job file and runs
nothing of any candidate until its job arrives, and the evaluator holds the device lock from `go`
to the verdict as before.  With `eval.sandbox.prestart_device` (cuda) the started worker and its runner
create their own CUDA contexts ahead (the evaluation's setup then finds the device up); without it
they create none.  With `eval.sandbox.prestart_problem` the started worker also makes the problem of
the task the running job has (`sandbox.Prime`: reference model, inputs on a seed of its own, the
baselines called once, a compiled one loaded from the kept caches copied into its own compile dir):
the job's own problem of the same task then finds torch.compile's and cuBLAS's code loaded in the
process.  A worker still importing, creating its contexts or making its problem when the current
job reaches a timed phase is stopped (SIGSTOP) until that job ends, so none of its start-up runs
beside a timed call; a ready one only waits on a pipe.  A started worker that died, hangs in its imports or was started for other settings is
discarded, and the job starts a fresh one.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any

from rl_kernels.evaluation.forkserver import ForkServer, ForkServerError
from rl_kernels.evaluation.sandbox import Prime, StartedWorker, WorkerSpec


class Standby:
    """Up to `size` started workers for the next jobs of one evaluator, served oldest first (a ready
    one before one still getting ready, one that made the job's task's problem ahead before any other).

        worker, why = standby.take(spec, task)   # None when there is no usable one (why says so)
        standby.refill(spec, prime)              # beside_job: the next jobs' workers start now ...
        result = sandbox.run_job(job, ..., spec, kept, worker, beside=standby.workers)   # ... stopped while this one times
        # (after_job: run_job without `beside`, then refill)

    `enabled` False makes `take` and `refill` no-ops (each job starts its own worker); `ready_s` is
    how long `take` waits for a started worker that is still importing before it starts a fresh one
    instead.  More than one (`size`) hides a start-up longer than a job: each job takes a ready one
    (the oldest has had the most time), and one more starts.  With `fork_server` every worker, started
    ahead or not, is forked from the fork server for its settings (`server`, `start`), which
    imported once: a start takes milliseconds instead of the imports' seconds.
    """

    def __init__(self, enabled: bool, ready_s: float, size: int = 1, fork_server: bool = False) -> None:
        if size < 1:
            raise ValueError(f"a standby of {size} workers: at least 1")
        self.enabled = enabled
        self.ready_s = ready_s
        self.size = size
        self.fork_server = fork_server
        self._held: list[StartedWorker] = []
        self._servers: list[tuple[Any, ForkServer]] = []   # (WorkerSpec.server_key, its server)
        self._given_up: dict[Any, str] = {}   # server keys whose server failed to fork a worker: why
        self._lock = threading.Lock()
        # The owner going away (or the interpreter exiting) ends the unused workers and the servers with it.
        self._finalizer = weakref.finalize(self, _close_all, self._held, self._servers)

    @property
    def held(self) -> StartedWorker | None:
        """The started worker the next job gets (the oldest), if any."""
        with self._lock:
            return self._held[0] if self._held else None

    @property
    def workers(self) -> tuple[StartedWorker, ...]:
        """Every started worker, oldest first."""
        with self._lock:
            return tuple(self._held)

    def take(self, spec: WorkerSpec, task: str | None = None) -> tuple[StartedWorker | None, str]:
        """The started worker for a job of `task`: the oldest ready one that made that task's problem
        ahead, else the oldest ready one, else the oldest once it is ready (waiting up to `ready_s`),
        if it suits `spec`; else None; and what happened: "standby", "none", "other_settings" (the
        others started with it are ended too), "died" or "not_ready"."""
        with self._lock:
            ready = [w for w in self._held if w.spec == spec and w.progress.ready.is_set() and w.proc.poll() is None]
            made = [w for w in ready if w.prime is not None and w.prime.task == task]
            worker = (made or ready or self._held or [None])[0]
            if worker is not None:
                self._held.remove(worker)
        if worker is None:
            return None, "none"
        if worker.spec != spec:
            worker.discard()
            self._discard_unlike(spec)
            return None, "other_settings"
        if not worker.wait_ready(self.ready_s):
            why = "died" if worker.proc.poll() is not None else "not_ready"
            worker.discard()
            return None, why
        return worker, "standby"

    def refill(self, spec: WorkerSpec, prime: Prime | None = None) -> None:
        """Starts workers for the next jobs until `size` are held (ending any started for other
        settings), each making `prime`'s problem before it says ready.  A worker made for another
        task than its job's is still taken: its job makes its own problem, as without a prime."""
        if not self.enabled:
            return
        self._discard_unlike(spec)
        while True:
            with self._lock:
                if len(self._held) >= self.size:
                    return
            worker = self.start(spec, prime)
            with self._lock:
                self._held.append(worker)

    def start(self, spec: WorkerSpec, prime: Prime | None = None) -> StartedWorker:
        """A worker for `spec` (making `prime`'s problem ahead), forked from the fork server when
        there is one.  A server that cannot fork one (it could not import, or its imports
        initialised CUDA) is given up for these settings with a warning saying why, and this and
        every later worker for them is a new process: slower, never wrong."""
        server = self.server(spec)
        if server is not None:
            try:
                return StartedWorker(spec, server, prime)
            except ForkServerError as exc:
                with self._lock:
                    self._given_up[spec.server_key] = str(exc)
                warnings.warn(f"rl_kernels: workers start as new processes from now on: {exc}", RuntimeWarning,
                              stacklevel=2)
        return StartedWorker(spec, prime=prime)

    def server(self, spec: WorkerSpec) -> ForkServer | None:
        """The fork server for `spec`'s settings (`WorkerSpec.server_key`), started now if there is
        none or it died; None without `fork_server`, without namespaces (a forked worker needs
        its own mount namespace, see `forkserver`) or once the server for them was given up.  A server for other settings is closed once
        none of the workers it forked is alive."""
        if not self.fork_server or spec.cfg.isolation != "namespaces" or spec.server_key in self._given_up:
            return None
        with self._lock:
            current = None
            for key, server in list(self._servers):
                if key == spec.server_key and server.alive:
                    current = server
                elif not server.alive or server.live_children == 0:
                    self._servers.remove((key, server))
                    server.close()
            if current is None:
                # Its imports are a new worker's: bounded by the job's wall limit, as a fresh worker's are.
                current = ForkServer(spec.environment, spec.flags, spec.cfg.scratch_root, spec.cfg.timeout_s)
                self._servers.append((spec.server_key, current))
            return current

    def close(self) -> None:
        """Ends every unused worker and every fork server."""
        _close_all(self._held, self._servers)

    def _discard_unlike(self, spec: WorkerSpec) -> None:
        with self._lock:
            unlike = [w for w in self._held if w.spec != spec]
            self._held[:] = [w for w in self._held if w.spec == spec]
        for worker in unlike:
            worker.discard()


def _close_all(held: list[StartedWorker], servers: list[tuple[Any, ForkServer]]) -> None:
    while held:
        held.pop().discard()
    while servers:
        servers.pop()[1].close()
