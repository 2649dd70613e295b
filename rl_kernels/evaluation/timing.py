"""Interleaved timing of a candidate against a baseline in one process on one device.

Protocol (DESIGN.md, "Evaluation protocol" step 4):
- `kernel` mode: per sample, outputs poisoned and the L2 (or the CPU caches) flushed *before* the
  timed region; CUDA events around the call on the current stream.  Inputs come from a pool of
  sets larger than L2, and no call sees values an earlier call saw, nor finds its values in memory
  before its own turn (`FreshValues`): fresh values for every set are drawn in one burst into
  memory no call is given, once every set was used, and each set's are copied into it right before
  its call (in stream order, before the flush), warm-up and sync-guard calls included.  A candidate
  that reads the other sets when it runs finds values already used, never a later call's.
  (Drawing one set before every call gives the same guarantee, but where drawing the inputs takes
  longer than the call, as for a 2048x8192x2048 GEMM, the GPU ran in another load regime and read
  4.5% slower than triton's do_bench; docs/EVALUATOR.md.  A copy costs less than a draw.)  Sides
  are interleaved in rounds, each round in a random order, so neither side profits from its position.  On cuda the calls are
  queued back to back (`timing.sync_every` calls per host sync), so the GPU runs the protocol as a
  sustained load without host-side idle gaps.  A separate *sync guard* re-times a few calls with a device-wide
  synchronize before the end event: work that escapes the stream (side streams, deferred launches)
  shows up as a gap between the two that the baseline does not have.  (Timing every sample with
  the synchronize inside the interval would add ~5-10 us of host latency per call and make small
  GEMMs unmeasurable; the guard keeps both fidelity and the defence.)
- `offline` mode (CUDA-L2): back-to-back calls, host wall-clock per call including a device sync.
- `server` mode (CUDA-L2): like offline, but each call follows an exponentially distributed idle gap
  at the configured QPS, so clocks and caches cool down as in a serving system.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy
import torch

from rl_kernels.config import TimingConfig
from rl_kernels.evaluation.correctness import snapshot
from rl_kernels.evaluation.problems import InputSet


@dataclass
class Side:
    """One timed function: `run(i)` calls it on pool set i, `prepare(i)` runs before the timed region."""

    run: Callable[[int], Any]
    prepare: Callable[[int], None] = lambda i: None


@dataclass
class Samples:
    ms: dict[str, list[float]] = field(default_factory=dict)
    guard_gap_ms: dict[str, float] = field(default_factory=dict)
    rechecked: int = 0
    sm_clock_mhz: float | None = None
    # Every timed call in the order it ran: (side, pool set, ms).  Kept so a bias between sides can
    # be traced to pool sets or positions (docs/EVALUATOR.md, "Noise").
    trace: list[tuple[str, int, float]] = field(default_factory=list)


class FreshValues:
    """The input values of the pool's next calls, kept where no candidate call can read them until
    their own call: a candidate that reads every set it can reach (the pool's other buffers, a
    window's later sets) finds only values already used, so precomputing them earns nothing.

    `draw` makes fresh values for every set in one burst, in memory of this process that is never
    shared (the judge's, under the split boundary); `write(i)` copies set i's into its buffers,
    which the caller does right before set i's call and after the previous call ended, in stream
    order on cuda (the flush that follows keeps them cold).  A copy costs less than a draw (no
    random numbers); what it does to the GPU's load regime against the in-place burst refresh is
    what benchmarks/gpu_evaluator.py's fidelity section measures (`ours_burst_in_place`).
    """

    def __init__(self, problem: Any, pool: list[InputSet], dist: str, gen: torch.Generator):
        self.problem, self.pool, self.dist, self.gen = problem, pool, dist, gen
        self.staged = [InputSet([x.clone() if isinstance(x, torch.Tensor) else x for x in s.args]) for s in pool]

    def draw(self) -> None:
        """Fresh values for every set (each set used once before the next draw)."""
        for s in self.staged:
            self.problem.refresh(s, self.dist, self.gen)

    def fix_check(self, i: int) -> list[Any]:
        """Set i's next call is re-checked: its reference, computed now from the values it will
        get, and those values, to compare its inputs with after the call."""
        self.problem.reference(self.staged[i])
        return snapshot(self.staged[i].args)

    def write(self, i: int) -> None:
        """Set i's fresh values into its buffers (and their reference, if one was fixed)."""
        s, new = self.pool[i], self.staged[i]
        for dst, src in zip(s.args, new.args):
            if isinstance(dst, torch.Tensor):
                one_thread(lambda a, b: numpy.copyto(a, b), lambda: dst.copy_(src), dst, src)
        s.reference = new.reference


def one_thread(host: Callable[..., Any], otherwise: Callable[[], Any], *tensors: torch.Tensor) -> None:
    """`host` on the tensors' numpy views (one thread) for cpu tensors of dtypes numpy has, else
    `otherwise()`.  torch runs a larger copy or fill on its OpenMP pool, whose threads must wake
    beside the runner's on the same cores: under the split boundary a 128 KiB copy between two
    runner calls took 30-100 ms on the loaded 2-core machine instead of ~0.1 ms."""
    if all(t.device.type == "cpu" for t in tensors):
        try:
            views = [t.numpy() for t in tensors]
        except TypeError:   # bfloat16, float8: torch's own
            views = []
        if views:
            host(*views)
            return
    otherwise()


def _written_first(side: Side, fresh: FreshValues) -> Side:
    """`side` with set i's fresh values written at the start of its `prepare(i)`, so right before
    the flush and the call (in stream order on cuda)."""
    def prepare(i: int) -> None:
        fresh.write(i)
        side.prepare(i)
    return Side(run=side.run, prepare=prepare)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def rel_spread(xs: list[float]) -> float:
    """Inter-quartile range over the median: the spread we report next to every median."""
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    m = statistics.median(xs)
    return (q[2] - q[0]) / m if m > 0 else 0.0


class Flusher:
    """Evicts caches between timed calls by writing a buffer larger than the cache."""

    def __init__(self, device: str, nbytes: int):
        self.buf = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buf.fill_(1.0)


def sm_clock_mhz() -> float | None:
    """Current SM clock through NVML when available (recorded with each measurement)."""
    try:
        import pynvml
    except ModuleNotFoundError:
        return None
    try:
        return float(torch.cuda.clock_rate())
    except (RuntimeError, OSError, pynvml.NVMLError):
        return None


# Bound when this module is imported, before any candidate code runs in the process: a candidate
# that replaces torch.cuda.synchronize or Event cannot change how it is timed (the worker also
# rejects it for the replacement, `timer_patched`).
_SYNCHRONIZE = torch.cuda.synchronize
_EVENT = torch.cuda.Event
_SLEEP = torch.cuda._sleep


def device_sync() -> None:
    """torch.cuda.synchronize as it was when this module was imported (before any candidate code)."""
    _SYNCHRONIZE()


def spin_cycles_per_ms() -> float:
    """GPU clock cycles the cover spin burns per millisecond, measured on the device with events."""
    start, end = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
    cycles = 2_000_000
    _SLEEP(cycles)   # warm
    start.record()
    _SLEEP(cycles)
    end.record()
    _SYNCHRONIZE()
    return cycles / max(start.elapsed_time(end), 1e-6)


@dataclass
class LaunchBook:
    """One side's host launches, as the launch cover sees them."""

    recent: deque[float]                      # its last host launch times (ms)
    last: tuple[float, float] | None = None   # (spin ms, host ms) of its previous call
    spin_followed: int = 0                    # calls whose host time followed the spin before them

    @property
    def waits_for_the_device(self) -> bool:
        """Its calls synchronise with the device: their host time includes the spin queued before
        them, so a longer spin only makes them longer (seen twice, so one host spike is not enough)."""
        return self.spin_followed >= 2

    def add(self, spin_ms: float, host_ms: float, *, at_cap: bool = False) -> None:
        """Books one call.  Its host time followed the spin when the spin grew and the host time
        grew by at least half as much, or when the spin was at its cap (`at_cap`: it can grow no
        more, so growth cannot be seen again) and the host time still covered it whole.  A side
        that launches asynchronously takes the same host time whatever the spin, and the adaptive
        spin is `launch_cover_margin` times its slowest recent launch: it covers neither."""
        if self.last is not None:
            (spin0, host0), (spin1, host1) = self.last, (spin_ms, host_ms)
            grew = spin1 > 1.5 * spin0 and host1 - host0 > 0.5 * (spin1 - spin0)
            if grew or (at_cap and host1 >= spin1):
                self.spin_followed += 1
        self.last = (spin_ms, host_ms)
        self.recent.append(host_ms)


class IntervalClock:
    """Measures one call under the configured mode on the configured device.

    On cuda in `kernel` mode the spin queued before each start event must outlast the host's work
    between queueing it and the call's launch reaching the GPU; otherwise the GPU reaches the start
    event, idles, and host latency lands inside the interval.  A side whose launch path is slow on
    the host (torch.compile's guards and wrappers: tens of microseconds, with spikes) gets a longer
    spin: `launch_cover_margin` times the slowest of that side's last `RECENT_LAUNCHES` host launches
    (so the first call's lazy initialisation ages out during warm-up), never less than
    `launch_cover_cycles`.  A side whose calls synchronise with the device (a CUTLASS entry point
    ending in cudaDeviceSynchronize) waits for the spin itself, so its host time follows the spin up
    to `launch_cover_max_cycles`; once its host time is seen growing with the spin it keeps the
    fixed `launch_cover_cycles` (its host work before the launch is on the critical path anyway).
    """

    RECENT_LAUNCHES = 8

    def __init__(self, device: str, cfg: TimingConfig, flusher: Flusher | None, rng: random.Random):
        self.cuda = device.startswith("cuda")
        self.cfg = cfg
        self.flusher = flusher
        self.rng = rng
        self.perf_counter = time.perf_counter
        self.launches: dict[int, LaunchBook] = {}   # per side (by id)
        if self.cuda:
            self.event = _EVENT
            self.sync = _SYNCHRONIZE
            self.cycles_per_ms = spin_cycles_per_ms() if cfg.launch_cover_margin > 0 else 0.0

    def book(self, side: Side) -> LaunchBook:
        return self.launches.setdefault(id(side), LaunchBook(deque(maxlen=self.RECENT_LAUNCHES)))

    def cover_cycles(self, side: Side) -> int:
        """The spin for the next call of `side` (adapted to its host launch cost)."""
        book = self.book(side)
        if book.waits_for_the_device:
            return self.cfg.launch_cover_cycles
        adaptive = int(self.cfg.launch_cover_margin * max(book.recent or [0.0]) * self.cycles_per_ms)
        return max(self.cfg.launch_cover_cycles, min(adaptive, self.cfg.launch_cover_max_cycles))

    def enqueue(self, side: Side, i: int, *, guard: bool = False) -> tuple[Any, Any]:
        """`kernel` mode on cuda: queue prepare, flush, spin and the timed call; no host sync.

        Returns (pending interval, outputs).  The interval's events are resolved later, so calls
        can be queued back to back and the GPU need not idle between samples (sustained load, as
        in a training or serving loop, and as triton's do_bench times).  `guard` puts a
        device-wide synchronize before the end event (the sync guard's re-timing).
        """
        side.prepare(i)
        if self.flusher is not None and self.cfg.flush_l2:
            self.flusher()
        # The flush and a short spin keep the GPU busy while the host enqueues the start event
        # and the call, so host launch latency never lands inside the interval.
        cover = self.cover_cycles(side)
        if cover:
            _SLEEP(cover)
        start, end = self.event(enable_timing=True), self.event(enable_timing=True)
        t0 = self.perf_counter()
        start.record()
        out = side.run(i)
        spin_ms = cover / self.cycles_per_ms if self.cycles_per_ms else 0.0
        self.book(side).add(spin_ms, (self.perf_counter() - t0) * 1e3,
                            at_cap=cover >= self.cfg.launch_cover_max_cycles > self.cfg.launch_cover_cycles)
        if guard:
            self.sync()
        end.record()
        return (start, end), out

    def measure(self, side: Side, i: int, *, guard: bool = False) -> tuple[float, Any]:
        """One call, timed and synchronised."""
        mode = self.cfg.mode
        if mode == "kernel":
            if self.cuda:
                (start, end), out = self.enqueue(side, i, guard=guard)
                self.sync()
                return start.elapsed_time(end), out
            side.prepare(i)
            if self.flusher is not None and self.cfg.flush_l2:
                self.flusher()
            t0 = self.perf_counter()
            out = side.run(i)
            return (self.perf_counter() - t0) * 1e3, out
        side.prepare(i)
        if mode == "server":
            gap = min(self.rng.expovariate(self.cfg.server_qps), self.cfg.server_max_gap_ms / 1e3)
            time.sleep(gap)
        if self.cuda:
            self.sync()
        t0 = self.perf_counter()
        out = side.run(i)
        if self.cuda:
            self.sync()
        return (self.perf_counter() - t0) * 1e3, out


def interleaved(
    sides: dict[str, Side],
    pool_size: int,
    cfg: TimingConfig,
    device: str,
    flusher: Flusher | None,
    *,
    recheck_side: str | None = None,
    recheck: Callable[[int, Any], None] | None = None,
    recheck_calls: int = 3,
    seed: int = 0,
    fresh: FreshValues | None = None,
    before_recheck: Callable[[int], None] | None = None,
    beat: Callable[[int], None] | None = None,
) -> Samples:
    """Warm up, then take cfg.samples interleaved samples of every side.

    With `fresh`, every call (warm-up and sync guard included) gets a set that no call has used
    since the last draw, at random (the candidate cannot predict which buffers come next), with
    its fresh values written right before it, before its flush: a value-keyed output cache or a
    "skip if the inputs did not change" kernel never sees an input twice, and one that precomputes
    the sets it can reach finds no later call's values there.  Fresh values for the whole pool are
    drawn when none is left.  This boundary runs the candidate in this process, so the drawn
    values are readable by it; the judge/runner split keeps them out of its reach.
    `recheck(i, out)` is called (outside the timed region) for `recheck_calls` randomly chosen timed calls of `recheck_side`: a candidate that caches, skips or defers work on
    some calls is caught because it cannot know which calls are checked.  `before_recheck(i)` runs
    before such a call (outside the timed region): it fixes the reference and the inputs as they
    were, so a call that rewrites its inputs (zeros in, zeros out) cannot pass the check.
    `beat(calls)` runs before every call, outside the timed region, with the calls that may run
    before the host next waits for the device (the parent's watchdog allows that many): one for a
    synchronised call, a whole batch of `sync_every` for a queued one.
    """
    beat = beat or (lambda calls: None)
    rng = random.Random(seed)
    clock = IntervalClock(device, cfg, flusher, rng)
    names = list(sides)
    if fresh is not None:
        sides = {name: _written_first(side, fresh) for name, side in sides.items()}
    unused: list[int] = []

    def next_set() -> int:
        if fresh is None:
            return rng.randrange(pool_size)
        if not unused:
            fresh.draw()
            unused.extend(range(pool_size))
        return unused.pop(rng.randrange(len(unused)))

    for _ in range(cfg.warmup):
        for name in names:
            beat(1)
            clock.measure(sides[name], next_set())

    result = Samples(ms={n: [] for n in names})
    # Checked calls come from the second half, where every pool set has been seen before, so
    # a cache or a skipped call would be answering from an earlier visit.
    late = range(cfg.samples // 2, cfg.samples)
    checks = set(rng.sample(late, k=min(recheck_calls, len(late)))) if recheck else set()
    deadline = time.monotonic() + cfg.max_seconds
    queued = device.startswith("cuda") and cfg.mode == "kernel" and cfg.sync_every > 1
    pending: list[tuple[str, int, Any]] = []

    def resolve() -> None:
        """Read back the queued intervals (one host sync for the whole batch)."""
        if pending:
            clock.sync()
        for name, i, (start, end) in pending:
            ms = start.elapsed_time(end)
            result.ms[name].append(ms)
            result.trace.append((name, i, ms))
        pending.clear()

    for k in range(cfg.samples):
        # Each round runs every side once in a random order: a position effect (H200, 2026-12-02:
        # one of the four positions of a strict ABBA cycle ran ~10% slower for small GEMMs, for
        # reasons not found) then lands on both sides alike instead of biasing one of them.
        order = rng.sample(names, k=len(names))
        for name in order:
            # A random pool set per call: no side is tied to a fixed subset of the pool, and the
            # candidate cannot predict which buffers come next.
            i = next_set()
            checked = recheck is not None and name == recheck_side and k in checks
            if checked and before_recheck is not None:
                before_recheck(i)
            beat(cfg.sync_every if queued else 1)
            if queued:
                interval, out = clock.enqueue(sides[name], i)
                pending.append((name, i, interval))
                if checked or len(pending) >= cfg.sync_every:
                    resolve()   # a checked call's outputs are read before set i is used again
            else:
                ms, out = clock.measure(sides[name], i)
                result.ms[name].append(ms)
                result.trace.append((name, i, ms))
            if checked:
                recheck(i, out)
                result.rechecked += 1
        if k >= 29 and time.monotonic() > deadline:
            break
    resolve()
    if device.startswith("cuda") and cfg.mode == "kernel":
        result.sm_clock_mhz = sm_clock_mhz()
        for name in names:
            gaps = []
            for g in range(cfg.sync_guard_samples):
                beat(1)
                guarded, _ = clock.measure(sides[name], next_set(), guard=True)
                beat(1)
                plain, _ = clock.measure(sides[name], next_set())
                gaps.append(guarded - plain)
            result.guard_gap_ms[name] = median(gaps)
    return result
