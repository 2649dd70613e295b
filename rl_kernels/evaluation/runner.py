"""The runner: the only process that holds candidate code during an evaluation.

Forked by the judge (`judge.py`) inside the same sandbox, before the judge touches the device or
the job's problem; it runs `serve` until told to exit.  It maps the input sets the judge shared,
then loads the candidate behind the audit hook and the seccomp filter, and from then on only does
what the judge orders: call the candidate on named sets (timed with CUDA events or the host clock,
its outputs copied into the judge's output buffers; before each timed call it asks the judge for
that call's input values and waits until they are written, on cuda in stream order through two
inter-process events), re-time calls behind a device-wide sync,
record the ATen ops of one call and the device kernels of another, report its own integrity
checks.  It holds no reference output, no baseline, no verdict and no randomness the judge uses; everything it says goes back as JSON that the judge checks, and its
worst possible answer is a wrong one, which the judge can catch, or none, which fails the job.
"""

from __future__ import annotations

import math
import socket
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation import sandbox_policy
from rl_kernels.evaluation.channel import ChannelClosed, recv_order, send_report
from rl_kernels.evaluation.correctness import as_output_list, check_structure
from rl_kernels.evaluation.launches import record_launches
from rl_kernels.evaluation.problems import poison_allocator
from rl_kernels.evaluation.reasons import Reason, Rejected
from rl_kernels.evaluation.shared import MappedSet, attach
from rl_kernels.evaluation.timing import Flusher, IntervalClock, Side, device_sync
from rl_kernels.evaluation.worker import (cache_bytes, dispatched_ops, check_identities, check_torch_threads,
                                          error_verdict, lock_down, setup_device, task_from_json,
                                          timer_identities, unpack_candidate)


class Runner:
    """The candidate and the judge's sets, as the runner holds them."""

    def __init__(self, order: dict[str, Any], scratch: Path, sock: socket.socket):
        self.sock = sock
        self.cfg = EvalConfig.model_validate(order["config"])
        self.task = task_from_json(order["task"])
        self.job = order
        self.scratch = scratch
        self.device = setup_device(order["backend"], self.cfg)
        self.sets: dict[str, list[MappedSet]] = {}
        self.sides: dict[str, Side] = {}
        self.mappings: list[Any] = []
        self.call: Callable[[MappedSet], list[Any]] | None = None
        self.clock: IntervalClock | None = None
        self.violations: sandbox_policy.Violations | None = None
        # cuda: (record `called`, wait for `copied`), bound before any candidate code runs
        self.events: tuple[Callable[[], None], Callable[[], None]] | None = None

    # -- orders -------------------------------------------------------------------------------
    def attach(self, order: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        sets, keep = attach(order["descriptor"], fds, self.device)
        self.sets[order["tag"]] = sets
        self.mappings.extend(keep)
        events = order.get("events") or {}
        if events:
            device = torch.cuda.current_device()
            called = torch.cuda.Event.from_ipc_handle(device, events["called"])
            copied = torch.cuda.Event.from_ipc_handle(device, events["copied"])
            self.events = (called.record, copied.wait)
        return {"attached": len(sets)}

    def _await_values(self) -> None:
        """Before each timed call: tell the judge the previous call is done (on cuda: queued, and
        `called` recorded after it) and wait until it has written this call's input values (on
        cuda: this stream waits for `copied`, recorded after the judge's copy).  Until then the
        values exist only in the judge's memory."""
        if self.device == "cuda":
            assert self.events is not None, "the judge shared no events for the timed sets"
            self.events[0]()
        send_report(self.sock, {"next": True})
        order, _ = recv_order(self.sock)
        if order.get("op") != "go":
            raise RuntimeError(f"expected the judge's go-ahead, got {order.get('op')!r}")
        if self.device == "cuda":
            assert self.events is not None
            self.events[1]()

    def load(self, order: dict[str, Any]) -> dict[str, Any]:
        """Loads the candidate: from here on candidate code may run in this process."""
        import random

        self.identities = timer_identities()
        self.python_threads = threading.active_count()
        self.torch_threads = torch.get_num_threads()
        flusher = Flusher(self.device, 2 * cache_bytes(self.device, self.cfg))
        self.clock = IntervalClock(self.device, self.cfg.timing, flusher, random.Random(0))
        target = unpack_candidate(self.job, self.scratch)
        self.violations = lock_down(self.scratch, target)
        if self.task.kind == "hgemm":
            from rl_kernels.evaluation.artifact import load_hgemm_entry

            entry = load_hgemm_entry(target)

            def call(s: MappedSet) -> list[Any]:
                entry(s.args[0], s.args[1], s.args[2], s.outputs[0])
                return s.outputs
        else:
            from rl_kernels.evaluation.artifact import prebuilt_load_inline
            from rl_kernels.evaluation.problems import instantiate_model_new, task_init_inputs

            model = instantiate_model_new(self.job["candidate_source"], prebuilt_load_inline(target),
                                          task_init_inputs(self.task, order["init_seed"]), order["init_seed"],
                                          self.device)

            def call(s: MappedSet) -> list[Any]:
                with torch.no_grad():
                    return as_output_list(model(*s.args))
        self.call = call
        return {"loaded": True}

    def _prepare(self, s: MappedSet) -> None:
        """What the in-process protocol does before every call: poison what the output may land in."""
        if self.task.kind == "hgemm":
            s.outputs[0].fill_(float("nan"))
        else:
            poison_allocator(self.device, sum(o.numel() * o.element_size() for o in s.outputs))

    def _deliver(self, s: MappedSet, outs: list[Any]) -> None:
        """Module outputs go into the judge's buffers (hgemm candidates wrote there already)."""
        if self.task.kind == "hgemm":
            return
        cmp = check_structure(outs, s.outputs)
        if not cmp.ok:
            raise Rejected(cmp.reason, cmp.detail)  # type: ignore[arg-type]
        for slot, out in zip(s.outputs, outs):
            slot.copy_(out)

    def _side(self, tag: str) -> Side:
        """One Side per set list, kept across orders (the clock adapts its launch cover per side)."""
        if tag not in self.sides:
            sets, call = self.sets[tag], self.call
            assert call is not None
            self.sides[tag] = Side(run=lambda i: call(sets[i]), prepare=lambda i: self._prepare(sets[i]))
        return self.sides[tag]

    def run(self, order: dict[str, Any]) -> dict[str, Any]:
        """Calls the candidate on the named sets; with `timed`, each call is timed as in one process."""
        assert self.call is not None and self.clock is not None
        sets = self.sets[order["tag"]]
        side = self._side(order["tag"])
        ms: list[float] = []
        if order.get("timed"):
            self._integrity()
        else:
            for i in order["sets"]:
                self._prepare(sets[i])
                self._deliver(sets[i], side.run(i))
            self._sync()
            return {"ms": ms}
        queued = self.device == "cuda" and self.cfg.timing.mode == "kernel"
        pending = []
        for i in order["sets"]:
            self._await_values()
            if queued:
                interval, out = self.clock.enqueue(side, i)
                pending.append(interval)
            else:
                t, out = self.clock.measure(side, i)
                ms.append(t)
            self._deliver(sets[i], out)
        self._sync()
        ms.extend(start.elapsed_time(end) for start, end in pending)
        return {"ms": ms}

    def guard(self, order: dict[str, Any]) -> dict[str, Any]:
        """Guarded minus plain re-timings (work escaping the stream shows as a gap)."""
        assert self.call is not None and self.clock is not None
        side = self._side(order["tag"])
        gaps = []
        for a, b in order["pairs"]:
            self._await_values()
            guarded, _ = self.clock.measure(side, a, guard=True)
            self._await_values()
            plain, _ = self.clock.measure(side, b)
            gaps.append(guarded - plain)
        return {"gaps": gaps}

    def audit(self, order: dict[str, Any]) -> dict[str, Any]:
        """The ATen ops one call dispatches (the judge decides which are compute)."""
        call, s = self.call, self.sets[order["tag"]][order["set"]]
        assert call is not None
        ops = dispatched_ops(lambda: call(s))
        self._sync()
        return {"ops": sorted(ops)}

    def launches(self, order: dict[str, Any]) -> dict[str, Any]:
        """The device kernels one call runs, by name and device time (the judge decides whose)."""
        call, s = self.call, self.sets[order["tag"]][order["set"]]
        assert call is not None
        self._prepare(s)
        found = record_launches(lambda: call(s), self._sync)
        return {"launches": [[x.name, x.device_us] for x in found]}

    def _integrity(self) -> None:
        """Before timing and at the end: the timing functions and torch's thread count as they were."""
        check_identities(self.identities)
        check_torch_threads(self.torch_threads)

    def finish(self) -> dict[str, Any]:
        """The runner's own checks of what the candidate left behind."""
        self._integrity()
        if threading.active_count() > self.python_threads:
            raise Rejected(Reason.THREAD_SPAWN, "the candidate left Python threads running")
        self._raise_violations()
        return {"finished": True}

    def _raise_violations(self) -> None:
        if self.violations is not None and self.violations.items:
            kind, detail = self.violations.items[0]
            raise Rejected(Reason(kind), f"sandbox refused: {detail}")

    def _sync(self) -> None:
        """The device sync bound before any candidate code ran (a candidate may replace torch's)."""
        if self.device == "cuda":
            device_sync()


def failure(exc: BaseException, runner: Runner | None) -> dict[str, Any]:
    reason, detail = error_verdict(exc, runner.violations if runner is not None else None)
    return {"reject": reason.value, "detail": detail}


def serve(sock: socket.socket, scratch: Path) -> None:
    runner: Runner | None = None
    while True:
        try:
            order, fds = recv_order(sock)
        except ChannelClosed:
            return
        op = order["op"]
        if op == "exit":
            return
        try:
            if op == "hello":    # the judge waits for this runner's start-up (its context) to end
                reply: dict[str, Any] = {"hello": True}
            elif op == "setup":
                runner = Runner(order, scratch, sock)
                reply = {"ready": True}
            else:
                assert runner is not None, "setup must come first"
                handlers: dict[str, Callable[[], dict[str, Any]]] = {
                    "attach": lambda: runner.attach(order, fds), "load": lambda: runner.load(order),
                    "run": lambda: runner.run(order), "guard": lambda: runner.guard(order),
                    "audit": lambda: runner.audit(order), "launches": lambda: runner.launches(order),
                    "finish": runner.finish}
                reply = handlers[op]()
            if any(not math.isfinite(x) for x in reply.get("ms", [])):
                raise RuntimeError("a CUDA event returned a non-finite time")
        except Exception as exc:  # noqa: BLE001 - candidate code may raise anything; the judge gets a reason
            traceback.print_exc()
            reply = failure(exc, runner)
        send_report(sock, reply)


