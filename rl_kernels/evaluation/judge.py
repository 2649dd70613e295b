"""The judge: the trusted half of an evaluation under the split boundary (`eval.sandbox.boundary`).

Trust boundary, in one sentence: **no candidate code runs in the process that draws the entropy,
writes the inputs, holds the reference outputs, runs and times the baseline, compares the outputs
and writes the verdict.**  That process is the judge (the evaluation worker, started by
`sandbox.py`).  The candidate runs in the runner (`runner.py`), a child the judge starts inside the
same sandbox, which loads it behind the audit hook and the seccomp filter.  Between them:

- Input sets live in memory both map (`shared.py`); the judge writes the inputs, poisons the output
  buffers, and after each call reads the outputs and the guards in place, in its own process.
- A timed call's input values exist in that memory only from right before the call: the judge
  draws them into its own memory and copies set j in once call j-1 has ended (the runner asks for
  each call's values; on cuda the copy and the call are ordered by two inter-process events, no
  host sync), so a candidate that reads every set it can reach finds no later call's values.
- The judge alone decides which sets are used when and which timed calls are re-checked (fresh OS
  entropy the runner never sees); it checks the outputs of those calls after the runner reported.
- The candidate's fine clock (CUDA events, or the host clock on cpu) is in the runner.  The judge
  times every window of runner calls with its own wall clock and refuses an evaluation whose
  events leave much more of the window unexplained than the same harness leaves for the baseline
  in the judge (`timer_patched`): forged event times can understate a call only within that slack.
- The runner is stopped (SIGSTOP) while the judge times the baseline, so no thread it started can
  slow the baseline down.
- The judge is not dumpable: the runner, same user, cannot open its memory through /proc.
- The runner talks back in JSON only; a runner that dies, lies about its structure or stops
  answering fails the job (the parent's watchdog sees the judge go quiet).  The runner writes
  nothing to the parent: the judge beats for it, before each order with the candidate calls the
  order makes (a window's, the sync guard's pairs, one check) and again once it is answered.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import os
import random
import secrets
import signal
import socket
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from rl_kernels.config import EvalConfig, TimingConfig
from rl_kernels.evaluation.channel import ChannelClosed, recv_report, send_order
from rl_kernels.evaluation.correctness import snapshot
from rl_kernels.evaluation.inputs import DISTRIBUTIONS
from rl_kernels.evaluation.problems import InputSet
from rl_kernels.evaluation.reasons import CLOCK_GAP, Reason, Rejected
from rl_kernels.evaluation.sandbox import killed_by
from rl_kernels.evaluation.shared import SharedSets, replicate, share
from rl_kernels.evaluation.timing import Flusher, FreshValues, IntervalClock, Side, median, one_thread, sm_clock_mhz
from rl_kernels.evaluation.launches import Launch, dispatch_audit_wanted, judge_launches, launch_evidence_wanted
from rl_kernels.evaluation.worker import (Beat, cache_bytes, call_weight, check_correctness_call, check_fresh_values,
                                          check_pool_guards, check_repeatable, own_kernels, pool_size, recheck_call,
                                          refuse_torch_compute, sync, task_from_json)

_PR_SET_DUMPABLE = 4


class RunnerProcess:
    """The runner as the judge sees it: orders out, JSON reports back, stop/continue, its end.

    Forked from the worker before it touches the device or the job's problem, so the runner starts
    with torch imported (seconds saved per evaluation) and with nothing of the judge's in memory.
    """

    def __init__(self, scratch: Path, close_in_child: list[int], preload: tuple[str, ...] = (),
                 device_ahead: bool = False):
        """`preload`: modules the runner imports as soon as it exists, beside whatever its parent
        does next, so that no job pays for them; with `device_ahead` it then creates its CUDA
        context the same way (`worker.context_ahead`; its first answer comes after that)."""
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:   # the runner
            try:
                self.sock.close()
                for fd in close_in_child:
                    os.close(fd)
                for name in preload:
                    importlib.import_module(name)
                if device_ahead:
                    from rl_kernels.evaluation.worker import context_ahead

                    context_ahead(with_blas=False)
                from rl_kernels.evaluation.runner import serve

                serve(theirs, scratch)
            finally:
                os._exit(0)
        theirs.close()
        self.pid = pid
        self.returncode: int | None = None

    def ask(self, order: dict[str, Any], fds: list[int] = (), before_call: Callable[[int], None] | None = None,
            calls: int = 0) -> dict[str, Any]:
        """Sends one order and returns the report; a refusal or a dead runner raises `Rejected`.

        A timed order (`before_call` given) makes `calls` candidate calls, and the runner asks
        before each (`{"next": true}`); `before_call(k)` then writes call k's input values and the
        runner is told to go on.  A runner that asks for more calls, or answers without having
        asked once per call, fails the job (`crash`): no call runs on values not written for it."""
        asked = 0
        try:
            send_order(self.sock, order, list(fds))
            reply = recv_report(self.sock)
            while "next" in reply and "reject" not in reply and before_call is not None and asked < calls:
                before_call(asked)
                asked += 1
                send_order(self.sock, {"op": "go"})
                reply = recv_report(self.sock)
        except (ChannelClosed, OSError, ValueError) as exc:
            raise self._death(str(exc)) from None
        if "reject" not in reply and ("next" in reply or asked != calls):
            raise Rejected(Reason.CRASH, f"the runner asked for input values {asked + ('next' in reply)} "
                                         f"times for {calls} timed calls")
        if "reject" in reply:
            try:
                reason = Reason(reply["reject"])
            except ValueError:
                reason = Reason.RUNTIME_ERROR
            raise Rejected(reason, str(reply.get("detail", ""))[-2000:])
        return reply

    def _wait(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                return None
            else:
                time.sleep(0.01)
        return self.returncode

    def _death(self, why: str) -> Rejected:
        rc = self._wait(5.0)
        if rc is None:
            os.kill(self.pid, signal.SIGKILL)
            rc = self._wait(5.0)
        if rc is not None and rc < 0:
            return Rejected(*killed_by(-rc, "the runner"))
        return Rejected(Reason.CRASH, f"the runner ended (exit code {rc}) without answering: {why}")

    def stop(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGCONT)

    def close(self) -> None:
        if self.returncode is None:
            try:
                self.resume()
                send_order(self.sock, {"op": "exit"})
            except OSError:
                pass
            if self._wait(5.0) is None:
                os.kill(self.pid, signal.SIGKILL)
                self._wait(5.0)
        self.sock.close()


def become_undumpable() -> None:
    """Same uid as the runner: without this, the runner could write the judge's memory via /proc."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def with_output_buffers(problem: Any, sets: list[InputSet]) -> None:
    """Module tasks return new tensors; the judge gives each set NaN-filled buffers of the expected
    outputs' exact shapes and dtypes, which the runner copies the candidate's outputs into."""
    if problem.kind != "module":
        return
    layouts: dict[tuple[Any, ...], list[torch.Tensor]] = {}   # one eager call per distinct input shape
    for s in sets:
        key = tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else repr(x) for x in s.args)
        if key not in layouts:
            layouts[key] = problem.expected(s)
        s.outputs = [torch.full_like(e, float("nan")) for e in layouts[key]]


def _poison(s: InputSet) -> None:
    """Before the runner calls on s: an output that is never written reads as NaN (on one thread
    on cpu: `timing.one_thread`)."""
    for o in s.outputs:
        one_thread(lambda a: a.fill(float("nan")), lambda: o.fill_(float("nan")), o)


def _export(runner: RunnerProcess, tag: str, shared_sets: SharedSets, events: dict[str, bytes] | None = None) -> None:
    runner.ask({"op": "attach", "tag": tag, "descriptor": shared_sets.descriptor, "events": events or {}},
               shared_sets.fds)
    shared_sets.close_fds()


Window = tuple[float, float, int]   # (judge's wall ms, sum of the reported call ms, calls)


def check_clock(candidate: list[Window], baseline: list[Window], cfg: TimingConfig,
                copy_ms: float = 0.0) -> dict[str, float]:
    """The judge's wall clock against the runner's fine clock.

    Per call, the part of the windows that the reported times leave unexplained (launches,
    flushes, messages) is compared with the same quantity for the baseline, which the judge timed
    itself with the same harness; the runner also copies each call's outputs into the judge's
    buffers, which the judge timed itself too (`copy_ms`, counted twice for noise).  A runner that
    reports less than its calls took leaves the difference unexplained; beyond `clock_gap_factor`
    times the baseline's share plus `clock_gap_ms`, one baseline call and the copies it is
    `timer_patched`.
    """
    def unexplained(rows: list[Window]) -> float:
        return sum(w - t for w, t, _ in rows) / max(sum(c for _, _, c in rows), 1)

    u_c, u_b = unexplained(candidate), unexplained(baseline)
    base_ms = median([t / c for _, t, c in baseline]) if baseline else 0.0
    allowed = cfg.clock_gap_factor * max(u_b, 0.0) + cfg.clock_gap_ms + base_ms + 2 * copy_ms
    if u_c > allowed:
        raise Rejected(Reason.TIMER_PATCHED, (
            f"{CLOCK_GAP} of its windows: {u_c:.3f} ms per call unexplained by its "
            f"events against {u_b:.3f} ms for the baseline (allowed {allowed:.3f} ms)"))
    return {"candidate_unexplained_ms": u_c, "baseline_unexplained_ms": u_b, "allowed_ms": allowed}


class SplitEvaluation:
    """One candidate evaluation with the candidate in a runner process (see the module docstring)."""

    def __init__(self, problem: Any, cfg: EvalConfig, device: str, seed: int, baseline: str,
                 runner: RunnerProcess, beat: Beat):
        self.problem, self.cfg, self.device, self.seed = problem, cfg, device, seed
        self.baseline, self.runner, self.beat = baseline, runner, beat
        # Which sets each timed call gets and which calls are re-checked: entropy the runner never sees.
        self.order_seed = secrets.randbits(63)
        self.rng = random.Random(self.order_seed)

    def share_sets(self) -> None:
        """Both phases' sets, exported before the candidate is loaded (CUDA IPC handles are opened
        while the judge is still dumpable; afterwards nothing in the runner can reach the judge)."""
        p, cfg = self.problem, self.cfg
        dists = [d for d in DISTRIBUTIONS if d in cfg.correctness.distributions]
        checks = [p.make_set(dists[i % len(dists)], self.seed + 1000 + i) for i in range(cfg.correctness.num_input_sets)]
        self.n_checks = len(checks)
        self.check_sets = checks + p.variant_sets(self.seed + 2000)
        with_output_buffers(p, self.check_sets)
        _export(self.runner, "check", share(self.check_sets, self.device))
        # The timing pool: copies of one set (every timed call gets fresh values written right
        # before it, so the copies never serve a measured call with equal values).
        template = p.make_set(cfg.timing.input_distribution, self.seed + 5000)
        with_output_buffers(p, [template])
        pool = replicate(template, pool_size(p, self.device, cfg), self.device)
        self.pool = pool.sets
        events: dict[str, bytes] = {}
        if self.device == "cuda":
            # `called`: the runner records it after each timed call, the judge's copy of the next
            # call's values waits for it; `copied`: the other way round.  Both are the judge's.
            self.called, self.copied = torch.cuda.Event(interprocess=True), torch.cuda.Event(interprocess=True)
            events = {"called": self.called.ipc_handle(), "copied": self.copied.ipc_handle()}
        _export(self.runner, "pool", pool, events)

    def _ask(self, order: dict[str, Any], calls: int) -> dict[str, Any]:
        """One order that makes the runner call the candidate `calls` times (as the watchdog counts
        them), between two heartbeats."""
        self.beat(calls)
        reply = self.runner.ask(order)
        self.beat(1)   # answered: what follows is the judge's own work
        return reply

    def _call(self, tag: str, sets: list[InputSet], i: int) -> None:
        _poison(sets[i])
        sync(self.device)
        self._ask({"op": "run", "tag": tag, "sets": [i], "timed": False}, call_weight(self.problem, sets[i]))

    def correctness(self) -> dict[str, float]:
        """The in-process protocol's checks, each decided here on the judge's copy of the memory."""
        p, sets = self.problem, self.check_sets
        worst_abs = worst_rel = 0.0
        for i, s in enumerate(sets):
            before = snapshot(s.args)
            self._call("check", sets, i)
            label = f"input set {i}" if i < self.n_checks else f"variant shape {i - self.n_checks}"
            cmp = check_correctness_call(p, s, s.outputs, before, label)
            worst_abs, worst_rel = max(worst_abs, cmp.max_abs_err), max(worst_rel, cmp.rel_norm_err)
        s0 = sets[0]
        first = [o.clone() for o in s0.outputs]
        self._call("check", sets, 0)
        check_repeatable(p, first, list(s0.outputs))
        # Same buffers, new values: an output cache keyed on pointers answers with the old result.
        p.refresh(s0, "uniform", torch.Generator(device=self.device).manual_seed(self.seed + 4000))
        self._call("check", sets, 0)
        check_fresh_values(p, s0, list(s0.outputs))
        return {"max_abs_err": worst_abs, "rel_norm_err": worst_rel}

    def audit_torch_ops(self) -> None:
        ops = self._ask({"op": "audit", "tag": "check", "set": 1}, call_weight(self.problem, self.check_sets[1]))["ops"]
        refuse_torch_compute({str(op) for op in ops}, self.cfg)

    def launches(self, own: frozenset[str]) -> dict[str, Any]:
        """The kernels of one runner call against the ones the candidate's build registers."""
        reply = self._ask({"op": "launches", "tag": "check", "set": 2}, call_weight(self.problem, self.check_sets[2]))
        rows = reply.get("launches")
        if not isinstance(rows, list) or not all(
                isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and isinstance(r[1], (int, float))
                for r in rows):
            raise Rejected(Reason.NO_CUSTOM_KERNEL, f"the runner's kernel record is malformed: {str(rows)[:200]}")
        return judge_launches([Launch(name, float(us)) for name, us in rows], own, self.cfg.launches.max_foreign_share)

    def timing(self) -> dict[str, Any]:
        """Windows of candidate calls (in the runner) and of baseline calls (here), in random order."""
        p, cfg, device, rng = self.problem, self.cfg, self.device, self.rng
        tc = cfg.timing
        n = len(self.pool)
        dist = tc.input_distribution
        # Fresh values drawn into the judge's own memory, never mapped by the runner; each set's are
        # copied into it right before its call (`write`), on both sides alike.
        self.fresh = FreshValues(p, self.pool, dist, torch.Generator(device=device).manual_seed(self.seed + 7000))
        unused: list[int] = []

        def take(count: int) -> list[int]:
            """`count` distinct sets no call has seen since the last draw (fresh values for the whole
            pool are drawn first when fewer are left, so no window sees one set twice)."""
            if len(unused) < count:
                self.fresh.draw()
                sync(device)
                unused[:] = range(n)
            return [unused.pop(rng.randrange(len(unused))) for _ in range(count)]

        def prepare(i: int) -> None:
            self.beat(1)
            self.fresh.write(i)
            p.prepare(self.pool[i])

        base = Side(run=lambda i: p.call_baseline(self.baseline, self.pool[i]), prepare=prepare)
        flusher = Flusher(device, 2 * cache_bytes(device, cfg))
        clock = IntervalClock(device, tc, flusher, rng)
        queued = device == "cuda" and tc.mode == "kernel"

        def baseline_window(sets: list[int]) -> tuple[list[float], float]:
            t0 = time.monotonic()
            if queued:
                pending = [clock.enqueue(base, i)[0] for i in sets]
                sync(device)
                times = [a.elapsed_time(b) for a, b in pending]
            else:
                times = [clock.measure(base, i)[0] for i in sets]
            return times, time.monotonic() - t0

        def candidate_window(sets: list[int], checked: dict[int, list[Any]] | None = None) -> tuple[list[float], float]:
            """The runner's calls on `sets`, each given its values when the one before has ended;
            the outputs of the calls in `checked` are taken as they are when the runner asks for
            the next call's values (a call cannot finish its work later, once it saw them)."""
            reply, wall = self._timed_order({"op": "run", "tag": "pool", "sets": sets, "timed": True}, sets, checked)
            times = reply.get("ms")
            if (not isinstance(times, list) or len(times) != len(sets)
                    or not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in times)):
                what = len(times) if isinstance(times, list) else repr(times)
                raise Rejected(Reason.TIMER_PATCHED, f"the runner reported {what} times for {len(sets)} calls")
            return [float(x) for x in times], wall

        # Warm-up on both sides (not recorded), the runner's first so it is stopped during the judge's;
        # its calls get fresh values like every timed call.
        for window in (candidate_window, baseline_window):
            left = tc.warmup
            while left > 0:
                count = min(tc.window_calls, n, left)
                window(take(count))
                left -= count
        late = range(tc.samples // 2, tc.samples)
        checks = set(rng.sample(late, k=min(cfg.correctness.recheck_timed_calls, len(late))))
        ms: dict[str, list[float]] = {"candidate": [], self.baseline: []}
        walls: dict[str, list[Window]] = {"candidate": [], self.baseline: []}
        rechecked = 0
        deadline = time.monotonic() + tc.max_seconds
        while len(ms["candidate"]) < tc.samples:
            for side in rng.sample(["candidate", self.baseline], k=2):
                done = len(ms[side])
                count = min(tc.window_calls, n, tc.samples - done)
                if count <= 0:
                    continue
                sets = take(count)
                checked: dict[int, list[Any]] = {}   # set -> its inputs; reference fixed before the call
                if side == "candidate":
                    for i in (sets[k - done] for k in range(done, done + count) if k in checks):
                        checked[i] = self.fresh.fix_check(i)
                times, wall = candidate_window(sets, checked) if side == "candidate" else baseline_window(sets)
                ms[side].extend(times)
                walls[side].append((wall * 1e3, sum(times), count))
                for i, before in checked.items():
                    recheck_call(p, self.pool[i], self.outputs_seen.get(i, self.pool[i].outputs), before)
                    rechecked += 1
            if len(ms["candidate"]) >= 30 and time.monotonic() > deadline:
                break
        clock_figures = check_clock(walls["candidate"], walls[self.baseline], tc, self._output_copy_ms())
        result: dict[str, Any] = {"samples_ms": ms, "pool_sets": n, "rechecked": rechecked,
                                  "sm_clock_mhz": sm_clock_mhz() if queued else None, "clock_check": clock_figures,
                                  "order_seed": self.order_seed, "boundary": "split"}
        if queued:
            result["guard_gap_ms"] = self._guard_gaps(clock, base, take)
        return result

    def _timed_order(self, order: dict[str, Any], calls: list[int],
                     checked: dict[int, list[Any]] | None = None) -> tuple[dict[str, Any], float]:
        """One order of timed candidate calls on the pool sets `calls`: the runner resumed for it and
        stopped after, the watchdog told of the calls in flight, each call given its values when the
        one before has ended (`_values_for`).  The reply and the wall seconds between resume and stop."""
        self.beat(len(calls))
        self.runner.resume()
        t0 = time.monotonic()
        reply = self.runner.ask(order, before_call=self._values_for(calls, checked), calls=len(calls))
        wall = time.monotonic() - t0
        self.runner.stop()
        self.beat(1)
        return reply, wall

    def _values_for(self, calls: list[int], checked: dict[int, list[Any]] | None = None) -> Callable[[int], None]:
        """What the judge does when the runner asks for call k's values (`RunnerProcess.ask`): once
        call k-1 has ended (on cuda: the judge's stream waits for the runner's `called` event), it
        keeps call k-1's outputs if that call is re-checked, writes set `calls[k]`'s fresh values,
        poisons its outputs and (cuda) records `copied`, which the runner's stream waits for before
        call k."""
        self.outputs_seen: dict[int, list[torch.Tensor]] = {}
        cuda = self.device == "cuda"

        def before_call(k: int) -> None:
            if cuda:
                self.called.wait()
            if k > 0 and checked and calls[k - 1] in checked:
                self.outputs_seen[calls[k - 1]] = [o.clone() for o in self.pool[calls[k - 1]].outputs]
            self.fresh.write(calls[k])
            _poison(self.pool[calls[k]])
            if cuda:
                self.copied.record()

        return before_call

    def _output_copy_ms(self) -> float:
        """What copying one call's outputs costs (the runner does it after every module call)."""
        if self.problem.kind != "module":
            return 0.0
        outs = self.pool[0].outputs
        scratch = [torch.empty_like(o) for o in outs]
        times = []
        for _ in range(3):
            sync(self.device)
            t0 = time.perf_counter()
            for dst, src in zip(scratch, outs):
                dst.copy_(src)
            sync(self.device)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def _guard_gaps(self, clock: IntervalClock, base: Side, take: Callable[[int], list[int]]) -> dict[str, float]:
        """The runner's guarded-minus-plain pairs, and the same for the baseline here.  The runner's
        pairs go in orders whose sets come from one draw each (no order holds one set twice)."""
        k = self.cfg.timing.sync_guard_samples
        per_order = max(1, len(self.pool) // 2)
        gaps: list[Any] = []
        for first in range(0, k, per_order):
            calls = take(2 * min(per_order, k - first))
            pairs = [calls[j:j + 2] for j in range(0, len(calls), 2)]
            got = self._timed_order({"op": "guard", "tag": "pool", "pairs": pairs}, calls)[0]["gaps"]
            if not isinstance(got, list) or not all(isinstance(g, (int, float)) and math.isfinite(g) for g in got):
                raise Rejected(Reason.TIMER_PATCHED, "the runner's sync-guard report is not a list of times")
            gaps.extend(got)
        own = []
        for _ in range(k):
            a, b = take(2)
            guarded, _ = clock.measure(base, a, guard=True)
            plain, _ = clock.measure(base, b)
            own.append(guarded - plain)
        return {"candidate": statistics.median(gaps) if gaps else 0.0, self.baseline: statistics.median(own)}


def run_split(job: dict[str, Any], problem: Any, cfg: EvalConfig, device: str, seed: int,
              runner: RunnerProcess, report: Any) -> dict[str, Any]:
    """The candidate job under the split boundary, with a runner forked before the problem was set
    up; the caller has set up the problem and warmed the baseline.  Phase `share`: the runner's own
    setup and the input sets made and mapped into it, before the candidate is loaded."""
    report.phase("share")
    runner.ask({"op": "setup", "config": job["config"], "task": job["task"], "backend": job["backend"],
                "artifact_name": job["artifact_name"], "candidate_source": job.get("candidate_source", "")})
    ev = SplitEvaluation(problem, cfg, device, seed, job["baseline"], runner, report.beat)
    ev.share_sets()
    become_undumpable()
    report.phase("load")
    runner.ask({"op": "load", "init_seed": seed})
    report.phase("correctness")
    result: dict[str, Any] = dict(ev.correctness())
    allow_torch_ops = task_from_json(job["task"]).allow_torch_ops
    if dispatch_audit_wanted(problem.kind, allow_torch_ops, cfg):
        ev.audit_torch_ops()
    if launch_evidence_wanted(allow_torch_ops, cfg, device):
        report.phase("launches")
        result["launches"] = ev.launches(own_kernels(job))
    report.phase("timing")
    result.update(ev.timing())
    check_pool_guards(problem, ev.pool)
    runner.resume()
    runner.ask({"op": "finish"})
    return result
