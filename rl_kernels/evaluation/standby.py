"""One evaluation worker started ahead of an evaluator's next job.

Starting a worker costs seconds before it can do anything (process start, `import torch`, the
evaluator's modules, under namespaces the confinement's setup): on the 2-core cpu machine and the
H200 host alike that is a large share of an evaluation.  So the evaluator starts the worker for the
next job ahead (`sandbox.StartedWorker`), and it waits for its job once its imports are done.
`eval.sandbox.prestart` says when: `beside_job` as the current job starts (it imports while that job
sets up and checks correctness: back to back it has the job's duration to get ready, which is free
where the host has cores to spare), `after_job` when the current job has ended (on a host of two
cores an import beside the job slowed its correctness phase by about what it saved; a timer that
waits for its next candidate still finds the worker ready).

What does not change: one process serves one job and is then discarded (a crash, hang or corrupted
context of one candidate never reaches the next); the started worker touches no device and reads
no job file until its job arrives, and the evaluator holds the device lock from `go` to the verdict
as before.  A worker still importing when the current job reaches a timed phase is stopped
(SIGSTOP) until that job ends, so no import runs beside a timed call; a ready one only waits on a
pipe.  A started worker that died, hangs in its imports or was started for other settings is
discarded, and the job starts a fresh one.
"""

from __future__ import annotations

import threading
import weakref

from rl_kernels.evaluation.sandbox import StartedWorker, WorkerSpec


class Standby:
    """At most one started worker, for the next job of one evaluator.

        worker, why = standby.take(spec)     # None when there is no usable one (why says so)
        standby.refill(spec)                 # beside_job: the next job's worker starts now ...
        result = sandbox.run_job(job, ..., spec, kept, worker, beside=standby.held)   # ... stopped while this one times
        # (after_job: run_job without `beside`, then refill)

    `enabled` False makes every call a no-op (each job starts its own worker); `ready_s` is how long
    `take` waits for a started worker that is still importing before it starts a fresh one instead.
    """

    def __init__(self, enabled: bool, ready_s: float) -> None:
        self.enabled = enabled
        self.ready_s = ready_s
        self._held: list[StartedWorker] = []
        self._lock = threading.Lock()
        # The owner going away (or the interpreter exiting) ends an unused worker with it.
        self._finalizer = weakref.finalize(self, _discard_all, self._held)

    @property
    def held(self) -> StartedWorker | None:
        """The started worker waiting for the next job, if any."""
        return self._held[0] if self._held else None

    def take(self, spec: WorkerSpec) -> tuple[StartedWorker | None, str]:
        """The started worker if it suits `spec` and is ready, else None; and what happened:
        "standby", "none", "other_settings", "died" or "not_ready"."""
        with self._lock:
            worker = self._held.pop() if self._held else None
        if worker is None:
            return None, "none"
        if worker.spec != spec:
            worker.discard()
            return None, "other_settings"
        if not worker.wait_ready(self.ready_s):
            why = "died" if worker.proc.poll() is not None else "not_ready"
            worker.discard()
            return None, why
        return worker, "standby"

    def refill(self, spec: WorkerSpec) -> None:
        """Starts the worker for the next job (replacing any unused one)."""
        if not self.enabled:
            return
        self.close()
        worker = StartedWorker(spec)
        with self._lock:
            self._held.append(worker)

    def close(self) -> None:
        """Ends the unused worker, if any."""
        _discard_all(self._held)


def _discard_all(held: list[StartedWorker]) -> None:
    while held:
        held.pop().discard()
