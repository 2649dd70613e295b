"""The evaluation subprocess:
`python -c sandbox.WORKER_BOOT JOB.json RESULT_FD GO_FD [--split] [--warm-compile] [--dispatch-tools]
[--device-ahead]` (this module, run with its working directory off sys.path).

One fresh process per evaluation (DESIGN.md protocol step 1).  It may be started before its job
exists (`sandbox.StartedWorker`): it imports what every job needs, forks the runner (`--split`),
with `--device-ahead` creates its and the runner's CUDA contexts, with a `prime.json` in its scratch
dir makes that task's problem and calls its baselines once (`problem_ahead`), says `ready`, and
waits for `go` on GO_FD before it reads JOB.json; it reads no job file and runs no candidate code
before that (without `--device-ahead` and a prime it creates no CUDA context either: an import may
initialise the driver, nothing is allocated or run), so a process started ahead judges as one
started on demand does, only sooner.
Under `sandbox.boundary: split` (the default) this process is the judge and never loads the
candidate: the runner it forked (`judge.RunnerProcess`) does.
Under `shared` the candidate runs here, next to the timer and the checker: everything it could
tamper with is prepared *before* its code is loaded (reference model, baselines, timer objects,
audit hook); correctness comes before timing; the timing functions' identities are verified after
the candidate ran.  Results go back as JSON lines on an inherited pipe: `phase` lines while it
runs (so a crash can be attributed) and one `final` line.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation import compile_cache, confine, sandbox_policy
from rl_kernels.evaluation.correctness import Comparison, check_structure, compare_values, snapshot, unchanged
from rl_kernels.evaluation.inputs import DISTRIBUTIONS
from rl_kernels.evaluation.launches import (dispatch_audit_wanted, judge_launches, launch_evidence_wanted,
                                            own_kernel_keys, record_launches)
from rl_kernels.evaluation.problems import HgemmProblem, InputSet, ModuleProblem
from rl_kernels.evaluation.reasons import Reason, Rejected
from rl_kernels.evaluation.sandbox import PRIME_FILE, READY_LINE
from rl_kernels.evaluation.timing import Flusher, FreshValues, Side, interleaved
from rl_kernels.types import HgemmSpec, Task


def classify_error(exc: BaseException) -> Reason:
    msg = str(exc).lower()
    if "no kernel image is available" in msg:
        return Reason.ARCH_MISMATCH
    if any(s in msg for s in ("illegal memory access", "misaligned address", "illegal instruction",
                              "unspecified launch failure", "an illegal", "device-side assert")):
        return Reason.ILLEGAL_MEMORY_ACCESS
    if "out of memory" in msg or "bad_alloc" in msg or isinstance(exc, MemoryError):
        return Reason.OUT_OF_MEMORY
    if isinstance(exc, PermissionError) and "sandbox:" in msg:
        return Reason.SANDBOX_VIOLATION
    return Reason.RUNTIME_ERROR


def error_detail(exc: BaseException, frames: int = 3) -> str:
    """The exception's message and the innermost `frames` lines it came through, innermost first
    ("...: message (raised at runtime.py:99 in hgemm <- ...)"): a runtime error names where it
    happened, in the candidate's code or the judge's, without the whole trace."""
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]
    tb = traceback.extract_tb(exc.__traceback__)[-frames:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(tb))
    return f"{message} (raised at {where})" if where else message


def error_verdict(exc: BaseException, violations: sandbox_policy.Violations | None) -> tuple[Reason, str]:
    """Why a job that raised `exc` is refused, in the worker and in the runner alike: a refusal's own
    reason, else the error's class and where it was raised; a sandbox violation recorded before it
    takes precedence (the error is what the refused operation left behind)."""
    if isinstance(exc, Rejected):
        reason, detail = exc.reason, exc.detail
    else:
        reason, detail = classify_error(exc), error_detail(exc)
    if violations is not None and violations.items:
        kind, what = violations.items[0]
        return Reason(kind), f"sandbox refused: {what}; then: {detail}"
    return reason, detail


class Reporter:
    """Phase lines, heartbeats and the verdict, as JSON lines on the pipe the parent reads.

    The parent's watchdog (`sandbox.Watchdog`) kills the process when no line arrives within the
    allowance of the candidate calls the last line said were coming, once the candidate is loaded:
    a call that never returns is `hung` within seconds of when it should have ended.
    """

    BEAT_EVERY_S = 0.2   # heartbeat lines at most this often (written outside timed regions), see `beat`

    def __init__(self, fd: int):
        self.out = os.fdopen(fd, "w", buffering=1)
        self.violations: sandbox_policy.Violations | None = None
        self._last_beat = 0.0
        self._last_calls = 0

    def phase(self, name: str) -> None:
        self.out.write(json.dumps({"phase": name}) + "\n")

    def ahead(self, done: dict[str, Any]) -> None:
        """What the worker did before its job (`problem_ahead`), said before it is ready."""
        self.out.write(json.dumps({"ahead": done}) + "\n")

    def ready(self) -> None:
        """Imports done: the process can take its job."""
        self.out.write(READY_LINE)

    def beat(self, calls: int = 1) -> None:
        """Before candidate calls and after they return: proof that the previous ones returned, and
        how many candidate calls may run before the next line (the parent allows each one
        `hang_factor` baseline calls).  Written at most every `BEAT_EVERY_S`, unless it announces
        more calls than the last line written did: a skipped line may leave the parent allowing
        more than the work now in flight, never less."""
        now = time.monotonic()
        if now - self._last_beat >= self.BEAT_EVERY_S or calls > self._last_calls:
            self._last_beat, self._last_calls = now, calls
            self.out.write(f'{{"beat": {calls}}}\n')

    def compiled(self, job: dict[str, Any]) -> None:
        """Lists the kept compile caches (path -> sha256) while only the judge's code has run: the
        evaluator keeps exactly these bytes for the next evaluation of the task."""
        if job.get("compiled_dir"):
            listed = compile_cache.manifest(Path(job["compiled_dir"]))
            self.out.write(json.dumps({"compiled": listed}) + "\n")

    def final(self, payload: dict[str, Any]) -> None:
        payload["final"] = True
        self.out.write(json.dumps(payload) + "\n")
        self.out.flush()


def task_from_json(d: dict[str, Any]) -> Task:
    spec = HgemmSpec(**d["hgemm"]) if d.get("hgemm") else None
    return Task(id=d["id"], kind=d["kind"], source=d.get("source", ""), hgemm=spec,
                allow_torch_ops=d.get("allow_torch_ops", False))


def setup_device(backend: str, cfg: EvalConfig) -> str:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("backend cuda requested but no CUDA device is visible")
        torch.cuda.init()
        count = torch.cuda.device_count()
        if count < 1:   # seen in forked workers on an H100 host: not the candidate's doing
            raise RuntimeError(f"the CUDA driver initialised, yet torch.cuda.device_count() is "
                               f"{count} (the runtime counts {torch._C._cuda_getDeviceCount()}): "
                               "this worker's view of the device is broken; if it was forked from the fork server, "
                               "eval.sandbox.fork_server=false starts workers as new processes")
        return "cuda"
    cores = cfg.timing.cpu_cores or sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    return "cpu"


def cache_bytes(device: str, cfg: EvalConfig) -> int:
    """The cache the timing must defeat: the GPU's L2, or the configured CPU cache size."""
    if device == "cuda":
        return int(torch.cuda.get_device_properties(0).L2_cache_size)
    return cfg.timing.cpu_cache_bytes


def pool_size(problem: Any, device: str, cfg: EvalConfig) -> int:
    """Enough input sets that cycling through them never hits a warm cache."""
    cache = cache_bytes(device, cfg)
    need = math.ceil(cfg.timing.pool_l2_multiple * cache / max(problem.set_bytes, 1))
    if device == "cuda":
        need = max(need, cfg.timing.cuda_min_pool_sets)
    fit = max(cfg.timing.max_pool_bytes // max(problem.set_bytes, 1), 2)
    return int(max(2, min(need, fit, cfg.timing.max_pool_sets)))


def make_problem(task: Task, device: str, cfg: EvalConfig, seed: int, baselines: list[str],
                 cublas_library: str | None) -> Any:
    if task.kind == "hgemm":
        assert task.hgemm is not None
        problem = HgemmProblem(task.hgemm, device, cfg)
        if device == "cuda" and any(b.startswith("cublas") for b in baselines):
            from rl_kernels.evaluation.cublas import load_cublas_baselines

            if cublas_library is None:
                raise RuntimeError("cuBLAS baselines requested, but the job names no prebuilt cuBLAS library")
            problem.add_cublas(load_cublas_baselines(cfg, Path(cublas_library)))
        return problem
    return ModuleProblem(task, device, cfg, seed, with_compile="compile" in baselines)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def check_outputs(problem: Any, s: InputSet, outs: list[Any]) -> Comparison:
    structure = check_structure(outs, problem.expected(s))
    if not structure.ok:
        return structure
    return compare_values(outs, problem.reference(s), problem.tolerance())


def check_correctness_call(problem: Any, s: InputSet, outs: list[Any], inputs_before: list[Any],
                           label: str) -> Comparison:
    """One correctness-phase call: outputs against the reference, inputs unchanged, guards intact."""
    cmp = check_outputs(problem, s, outs)
    if not cmp.ok:
        raise Rejected(cmp.reason, f"{label}: {cmp.detail}")  # type: ignore[arg-type]
    if not unchanged(s.args, inputs_before):
        raise Rejected(Reason.INPUT_MUTATED, f"{label}: the candidate modified its inputs")
    if not problem.guards_intact(s):
        raise Rejected(Reason.OUT_OF_BOUNDS_WRITE, f"{label}: memory next to the output changed")
    return cmp


def check_pool_guards(problem: Any, pool: list[InputSet]) -> None:
    """After the timing phase, every pool set's guards untouched.  Nothing rewrites a guard, so this
    sees an out-of-bounds write by any timed call, warm-up and sync-guard calls included."""
    for i, s in enumerate(pool):
        if not problem.guards_intact(s):
            raise Rejected(Reason.OUT_OF_BOUNDS_WRITE, f"a timed call on pool set {i} wrote next to its output or "
                                                       "inputs (a guard region changed)")


def recheck_call(problem: Any, s: InputSet, outs: list[Any], inputs_before: list[Any]) -> None:
    """A re-checked timed call: its inputs as they were before it, its outputs against the reference
    computed from those inputs (both taken before the call)."""
    if not unchanged(s.args, inputs_before):
        raise Rejected(Reason.INPUT_MUTATED, "a timed call modified its inputs")
    cmp = check_outputs(problem, s, outs)
    if not cmp.ok:
        raise Rejected(Reason.STALE_OUTPUT, f"a timed call's output was wrong: {cmp.detail}")


Beat = Callable[[int], None]   # `Reporter.beat`: a sign of life, and the candidate calls now coming


def _no_beat(calls: int = 1) -> None:
    """The heartbeat of callers without a watchdog (benchmarks timing trusted code)."""


def call_weight(problem: Any, s: InputSet) -> int:
    """How many of the task's calls a candidate call on `s` counts as for the watchdog: one, or for
    a set larger than the task's own (a variant shape) the square of the ratio of their bytes, a
    generous bound on how the work of an operator grows with its inputs (a product of n x n
    matrices: the ratio to the power 1.5)."""
    nbytes = sum(x.numel() * x.element_size() for x in s.args if isinstance(x, torch.Tensor))
    return max(1, math.ceil((nbytes / max(problem.set_bytes, 1)) ** 2))


def correctness(problem: Any, cfg: EvalConfig, device: str, seed: int, beat: Beat = _no_beat) -> dict[str, float]:
    """Fresh inputs from every distribution, poisoned outputs, inputs unchanged, guards intact."""
    dists = [d for d in DISTRIBUTIONS if d in cfg.correctness.distributions]
    worst_abs = worst_rel = 0.0
    first: tuple[InputSet, list[torch.Tensor]] | None = None
    sets = [problem.make_set(dists[i % len(dists)], seed + 1000 + i) for i in range(cfg.correctness.num_input_sets)]
    for i, s in enumerate(sets + problem.variant_sets(seed + 2000)):
        before = snapshot(s.args)
        beat(call_weight(problem, s))
        problem.prepare(s)
        outs = problem.call_candidate(s)
        sync(device)
        beat(1)   # returned: the checks below are the worker's own work
        label = f"input set {i}" if i < len(sets) else f"variant shape {i - len(sets)}"
        cmp = check_correctness_call(problem, s, outs, before, label)
        worst_abs, worst_rel = max(worst_abs, cmp.max_abs_err), max(worst_rel, cmp.rel_norm_err)
        if first is None:
            first = (s, [o.detach().clone() for o in outs])
    assert first is not None
    s0, outs0 = first
    beat(1)
    problem.prepare(s0)
    again = problem.call_candidate(s0)
    sync(device)
    beat(1)
    check_repeatable(problem, outs0, list(again))
    # Same buffers, new values: an output cache keyed on pointers answers with the old result.
    problem.refresh(s0, "uniform", torch.Generator(device=device).manual_seed(seed + 4000))
    beat(1)
    problem.prepare(s0)
    reused = problem.call_candidate(s0)
    sync(device)
    beat(1)
    check_fresh_values(problem, s0, list(reused))
    return {"max_abs_err": worst_abs, "rel_norm_err": worst_rel}


def check_repeatable(problem: Any, first: list[torch.Tensor], again: list[torch.Tensor]) -> None:
    """Two runs on the same inputs: bitwise equal (NaNs where NaNs were), or within tolerance."""
    for a, b in zip(first, again):
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        if not bool(same.all()) and not compare_values(again, first, problem.tolerance()).ok:
            raise Rejected(Reason.NONDETERMINISTIC, "two runs on the same inputs differ beyond tolerance")


def check_fresh_values(problem: Any, s: InputSet, outs: list[Any]) -> None:
    """The call after `s` got new values in the same buffers: a pointer-keyed output cache fails here."""
    cmp = check_outputs(problem, s, outs)
    if not cmp.ok:
        raise Rejected(Reason.STALE_OUTPUT, f"same buffers with new values gave a wrong result: {cmp.detail}")


def dispatched_ops(call: Callable[[], Any]) -> set[str]:
    """The ATen operators `call()` dispatches (recorded under a Python dispatch mode)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Recorder():
        call()
    return seen


def refuse_torch_compute(ops: set[str], cfg: EvalConfig) -> None:
    """ATen compute among the dispatched ops means torch did the work (a torch fallback)."""
    compute = sorted(ops - set(cfg.correctness.allowed_torch_ops))
    if compute:
        raise Rejected(Reason.TORCH_FALLBACK, f"torch ops did the work: {', '.join(compute[:8])}")


def audit_torch_ops(problem: Any, cfg: EvalConfig, device: str, seed: int) -> None:
    """Run one call under a dispatch mode and reject ATen compute ops (a torch fallback)."""
    s = problem.make_set("normal", seed + 3000)
    ops = dispatched_ops(lambda: problem.call_candidate(s))
    sync(device)
    refuse_torch_compute(ops, cfg)


def own_kernels(job: dict[str, Any]) -> frozenset[str]:
    """The names the candidate's build registered, as the profiler may report them; read before any
    candidate code is loaded (the demangler is torch's)."""
    return own_kernel_keys(list(job.get("own_kernels") or []), torch._C._demangle)


def timing(problem: Any, cfg: EvalConfig, device: str, seed: int, baseline: str | None,
           candidate: bool, beat: Beat = _no_beat) -> dict[str, Any]:
    n = pool_size(problem, device, cfg)
    dist = cfg.timing.input_distribution
    pool = [problem.make_set(dist, seed + 5000 + i) for i in range(n)]
    # Each call's values written right before it (`interleaved`), drawn in bursts over the pool.
    fresh = FreshValues(problem, pool, dist, torch.Generator(device=device).manual_seed(seed + 7000))

    def prepare(i: int) -> None:
        """Before every call, outside the timed region: poison the outputs (`interleaved` beats)."""
        problem.prepare(pool[i])

    sides: dict[str, Side] = {}
    if candidate:
        sides["candidate"] = Side(run=lambda i: problem.call_candidate(pool[i]), prepare=prepare)
    names = [baseline] if baseline else list(problem.baselines)
    for name in names:
        sides[name] = Side(run=lambda i, name=name: problem.call_baseline(name, pool[i]), prepare=prepare)

    inputs_before: dict[int, list[Any]] = {}

    def before_recheck(i: int) -> None:
        inputs_before[i] = fresh.fix_check(i)   # reference and inputs from the values the call will get

    def recheck(i: int, outs: Any) -> None:
        recheck_call(problem, pool[i], list(outs), inputs_before.pop(i))

    flusher = Flusher(device, 2 * cache_bytes(device, cfg))
    samples = interleaved(sides, n, cfg.timing, device, flusher,
                          recheck_side="candidate" if candidate else None,
                          recheck=recheck if candidate else None,
                          recheck_calls=cfg.correctness.recheck_timed_calls, seed=seed, fresh=fresh,
                          before_recheck=before_recheck if candidate else None, beat=beat)
    if candidate:
        check_pool_guards(problem, pool)
    return {"samples_ms": samples.ms, "guard_gap_ms": samples.guard_gap_ms, "pool_sets": n,
            "rechecked": samples.rechecked, "sm_clock_mhz": samples.sm_clock_mhz}


def timer_identities() -> dict[str, Any]:
    ids: dict[str, Any] = {"perf_counter": time.perf_counter, "sleep": time.sleep}
    if torch.cuda.is_available():
        ids.update({"synchronize": torch.cuda.synchronize, "Event": torch.cuda.Event,
                    "elapsed_time": torch.cuda.Event.elapsed_time, "record": torch.cuda.Event.record})
    ids.update({"matmul": torch.matmul, "equal": torch.equal, "isnan": torch.isnan})
    return ids


def check_identities(before: dict[str, Any]) -> None:
    """Reject a candidate that replaced a timing function (checked before and after timing)."""
    changed = [k for k, v in timer_identities().items() if before.get(k) is not v]
    if changed:
        raise Rejected(Reason.TIMER_PATCHED, f"timing functions were replaced: {', '.join(changed)}")


def check_torch_threads(before: int) -> None:
    """Reject a candidate that changed torch's intra-op thread count (it would slow a CPU baseline)."""
    now = torch.get_num_threads()
    if now != before:
        raise Rejected(Reason.MONKEYPATCH, f"torch's thread count was changed from {before} to {now}")


def unpack_candidate(job: dict[str, Any], scratch: Path) -> Path:
    from rl_kernels.evaluation.artifact import unpack_artifact

    data = (scratch / "in" / job["artifact_name"]).read_bytes()
    return unpack_artifact(data, job["artifact_name"], scratch / "artifact")


def load_candidate(problem: Any, job: dict[str, Any], target: Path) -> None:
    from rl_kernels.evaluation.artifact import load_hgemm_entry, prebuilt_load_inline

    if problem.kind == "hgemm":
        problem.load_candidate(load_hgemm_entry(target))
    else:
        problem.load_candidate(job["candidate_source"], prebuilt_load_inline(target))


def lock_down(scratch: Path, target: Path) -> sandbox_policy.Violations:
    """Just before candidate code loads into this process: the audit hook (writes only under the
    scratch dir and torch's compile caches, dlopen only of the candidate's own libraries), then the
    seccomp filter (from here on fork/exec/ptrace/... kill the process)."""
    libs = [target] if target.is_file() else sorted(target.rglob("*.so"))
    violations = sandbox_policy.install(scratch, libs, compile_cache.env_dirs())
    confine.forbid_process_creation()
    return violations


def compile_cache_counters() -> dict[str, int]:
    """Inductor's FX-graph cache hits and misses in this process, its problem made ahead included:
    whether the baseline was loaded from the kept compile caches or compiled afresh."""
    from torch._dynamo.utils import counters

    return {k: int(v) for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}


def run_job(job: dict[str, Any], scratch: Path, report: Reporter, runner: Any) -> dict[str, Any]:
    """`runner` is the split boundary's runner, forked before the job arrived (None under `shared`);
    a job that does not evaluate a candidate ends it unused."""
    cfg = EvalConfig.model_validate(job["config"])
    report.phase("setup")
    if job["job"] != "evaluate" or cfg.sandbox.boundary == "shared":
        if runner is not None:
            runner.close()
        return _run_job(job, cfg, scratch, report, None)
    if runner is None:
        raise RuntimeError("the job evaluates across the split boundary, but the worker was started without a runner")
    try:
        return _run_job(job, cfg, scratch, report, runner)
    finally:
        runner.close()


def _run_job(job: dict[str, Any], cfg: EvalConfig, scratch: Path, report: Reporter, runner: Any) -> dict[str, Any]:
    task = task_from_json(job["task"])
    seed = int(job["seed"])
    device = setup_device(job["backend"], cfg)
    baselines = job.get("baselines") or ([job["baseline"]] if job.get("baseline") else [])
    problem = make_problem(task, device, cfg, seed, baselines, job.get("cublas_library"))
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    if job["job"] == "baselines":
        report.phase("baselines")
        errors = {}
        for name in list(problem.baselines):
            if name not in baselines:
                problem.baselines.pop(name)
                continue
            s = problem.make_set("normal", seed)
            try:
                cmp = check_outputs(problem, s, list(problem.call_baseline(name, s)))
            except RuntimeError as exc:  # a baseline that cannot run here (e.g. torch.compile w/o compiler)
                errors[name] = str(exc)[-400:]
                problem.baselines.pop(name)
                continue
            if not cmp.ok:
                errors[name] = f"{cmp.reason.value}: {cmp.detail}"  # type: ignore[union-attr]
                problem.baselines.pop(name)
        result["baseline_errors"] = errors
        if problem.baselines:
            result.update(timing(problem, cfg, device, seed, None, candidate=False))
        report.compiled(job)
        return result

    # Warm the baseline (and torch.compile) before any candidate code exists in this process.
    report.phase("warm")
    warm = problem.make_set("normal", seed)
    problem.call_baseline(job["baseline"], warm)
    sync(device)
    if job["baseline"] == "compile":
        result["baseline_compile"] = compile_cache_counters()
    report.compiled(job)
    if runner is not None:
        from rl_kernels.evaluation.judge import run_split

        result.update(run_split(job, problem, cfg, device, seed, runner, report))
        return result
    identities = timer_identities()
    own = own_kernels(job)
    threads_before = threading.active_count()
    torch_threads = torch.get_num_threads()
    report.phase("load")
    target = unpack_candidate(job, scratch)
    violations = lock_down(scratch, target)
    report.violations = violations
    load_candidate(problem, job, target)
    report.phase("correctness")
    result.update(correctness(problem, cfg, device, seed, report.beat))
    if dispatch_audit_wanted(problem.kind, task.allow_torch_ops, cfg):
        report.beat()
        audit_torch_ops(problem, cfg, device, seed)
        report.beat()
    if launch_evidence_wanted(task.allow_torch_ops, cfg, device):
        report.phase("launches")
        s = problem.make_set("normal", seed + 3500)
        report.beat()
        launches = record_launches(lambda: problem.call_candidate(s), lambda: sync(device))
        report.beat()
        result["launches"] = judge_launches(launches, own, cfg.launches.max_foreign_share)
    check_identities(identities)
    check_torch_threads(torch_threads)
    report.phase("timing")
    result.update(timing(problem, cfg, device, seed, job["baseline"], candidate=True, beat=report.beat))
    check_identities(identities)
    check_torch_threads(torch_threads)
    if violations.items:
        kind, detail = violations.items[0]
        raise Rejected(Reason(kind), f"sandbox refused: {detail}")
    if threading.active_count() > threads_before:
        raise Rejected(Reason.THREAD_SPAWN, "the candidate left Python threads running")
    return result


# What the runner imports to load a candidate (a module candidate's load_inline stand-in, the
# artifact loaders): the same for every job, so imported before any job, not inside `load`.
CANDIDATE_LOADERS = ("torch.utils.cpp_extension", "rl_kernels.evaluation.artifact")


def imports_ahead(warm_compile: bool, dispatch_tools: bool) -> tuple[str, ...]:
    """Every module `prepare` imports in one process or the other: what a fork server imports once
    for all the workers it forks."""
    return ("rl_kernels.evaluation.judge", "rl_kernels.evaluation.runner", *CANDIDATE_LOADERS,
            *(("torch._dynamo",) if warm_compile or dispatch_tools else ()),
            *(("torch._inductor.compile_fx",) if warm_compile else ()))


def warm_compiler() -> None:
    """Compiles and runs one tiny function on the cpu, single-threaded, once in the fork server:
    torch.compile's first use in a process initialises much (lowerings, graph passes, the code cache)
    that every compiled baseline then needs, and each forked worker inherits it (a kept softmax
    baseline's first call: 2.3 s -> 0.2 s on the 2-core machine).  Compiles in this process
    (`compile_threads` 1: inductor's pool of compile processes would outlive it as the server's
    children) and leaves no OpenMP threads (a fork would lose them), no compiled code and no
    counters behind.  Only where no CUDA device is visible (`cuda_visible`): around every compile
    dynamo saves and restores the CUDA RNG state when a device is there, which initialises the
    driver, and no child forked after that could use the device."""
    import torch._dynamo
    import torch._inductor.config
    from torch._dynamo.utils import counters

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch._inductor.config.patch(compile_threads=1):
            torch.compile(lambda x: torch.relu(x * 2.0 + 1.0))(torch.ones(8))
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        counters.clear()


def cuda_visible() -> bool:
    """Whether this process could use a CUDA device, asked without initialising the driver (NVML:
    the fork server's environment sets `PYTORCH_NVML_BASED_CUDA_CHECK`)."""
    return torch.cuda.is_available()


def context_ahead(with_blas: bool) -> None:
    """Creates this process's CUDA context (and with `with_blas` its cuBLAS handle, by one tiny
    product) before its job, from nothing of any job: the evaluation then starts on a device that is
    up.  A failure is left to the job: its `setup_device` repeats the step and reports it in its
    own words, as a worker that did nothing ahead would."""
    try:
        torch.cuda.init()
        a = torch.ones(8, 8, device="cuda")
        if with_blas:
            torch.mm(a, a)
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - reported by the job's own setup, which does the same again
        traceback.print_exc()


def prepare(scratch: Path, close_in_child: list[int], split: bool, warm_compile: bool,
            dispatch_tools: bool, device_ahead: bool = False) -> Any:
    """What every job needs, done before the job arrives; returns the runner (None unless `split`).

    The runner is forked first, as soon as the judge's and runner's modules are imported: before this
    process touches the device or anything of a job, and before torch.compile's modules (imported with
    `warm_compile`, seconds a compiled baseline would otherwise pay inside the evaluation). The
    candidate loaders are imported after the fork, by whichever process loads the candidate: importing
    `torch.utils.cpp_extension` asks `torch.cuda.is_available()`, which (outside the fork server's
    NVML-based check) asks the CUDA runtime, and torch then refuses CUDA in every child forked later
    ("Cannot re-initialize CUDA in forked subprocess"). With `dispatch_tools`, whichever process will
    record the candidate's ATen ops (the torch-fallback audit) or its kernel launches (the profiler)
    imports torch._dynamo now: both tools import it on first use, 1.5 s here and ~6 s on the H200 host
    inside a job. With `device_ahead` both processes create their CUDA contexts now (`context_ahead`),
    in parallel, and this one returns once the runner's is up too: a worker says ready only when nothing
    of its start-up is left to run beside a timed phase."""
    from rl_kernels.evaluation.judge import RunnerProcess

    importlib.import_module("rl_kernels.evaluation.runner")
    tools = ("torch._dynamo",) if dispatch_tools else ()
    runner = (RunnerProcess(scratch, close_in_child=close_in_child, preload=(*CANDIDATE_LOADERS, *tools),
                            device_ahead=device_ahead)
              if split else None)
    here = ("torch._dynamo", "torch._inductor.compile_fx") if warm_compile else ()
    if runner is None:
        here += (*CANDIDATE_LOADERS, *tools)   # under `shared` this process loads, records ops and launches
    for name in here:
        importlib.import_module(name)
    if device_ahead:
        context_ahead(with_blas=True)
        if runner is not None:
            runner.ask({"op": "hello"})
    return runner


def problem_ahead(prime_path: Path) -> dict[str, Any]:
    """Makes the problem that `prime_path` (`sandbox.Prime.job`) names, on a seed of its own, and
    calls each of its baselines once, before the job arrives; then drops it.  What stays is what
    the process loaded for it: torch.compile's code for the task's model (from the kept caches in
    this worker's own compile dir), the cuBLAS baselines' library and kernels, the task's program.
    A job of the same task then makes its own problem on its own seed in a fraction of the time
    (a module task's compiled baseline: ~1 s to ~0.1 s on an H100); a job of another task pays
    what it would have.  Only the evaluator's task, config and baselines are read (no candidate,
    no job file), and a failure here is left to the job, which makes its problem again and
    reports what goes wrong in its own words.  Returns what it did: the task, its seconds, and the
    error that stopped it (None when it made the problem and ran every baseline)."""
    import secrets

    t0 = time.monotonic()
    done: dict[str, Any] = {"task": None, "error": None}
    try:
        prime = json.loads(prime_path.read_text())
        done["task"] = str(prime["task"]["id"])
        cfg = EvalConfig.model_validate(prime["config"])
        device = setup_device(prime["backend"], cfg)
        seed = secrets.randbits(62)
        baselines = list(prime["baselines"])
        problem = make_problem(task_from_json(prime["task"]), device, cfg, seed, baselines,
                               prime.get("cublas_library"))
        s = problem.make_set("normal", seed)
        for name in baselines:
            if name in problem.baselines:
                problem.call_baseline(name, s)
        sync(device)
        del problem, s
        if device == "cuda":
            # A waiting worker holds its contexts, not the problem's blocks too (up to
            # `prestart_workers` wait), and its job allocates afresh, as one that made nothing ahead.
            torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001 - the job makes its problem again and reports the failure itself
        traceback.print_exc()
        done["error"] = error_detail(exc)[-500:]
    done["seconds"] = round(time.monotonic() - t0, 3)
    return done


def wait_for_go(go_fd: int) -> bool:
    """Blocks until the parent sends `go` (True) or closes the pipe without it (False: the process
    was started ahead and is no longer wanted)."""
    try:
        return os.read(go_fd, 2) == b"go"
    finally:
        os.close(go_fd)


def serve(job_path: Path, fd: int, go_fd: int, flags: list[str]) -> None:
    """The whole life of a worker, whether it was started as a new process (`main`) or forked
    from a fork server (`forkserver`): prepare, say ready, wait for `go`, run the job, exit."""
    report = Reporter(fd)
    scratch = job_path.parent.resolve()
    runner = prepare(scratch, [report.out.fileno(), go_fd], "--split" in flags, "--warm-compile" in flags,
                     "--dispatch-tools" in flags, "--device-ahead" in flags)
    prime = scratch / PRIME_FILE
    if prime.is_file():
        report.ahead(problem_ahead(prime))
    report.ready()
    if not wait_for_go(go_fd):
        os._exit(0)
    job = json.loads(job_path.read_text())
    try:
        result = run_job(job, scratch, report, runner)
        report.final({"ok": True, **result})
    except Rejected as exc:
        report.final({"ok": False, "reason": exc.reason.value, "detail": exc.detail})
    except Exception as exc:  # noqa: BLE001 - the one boundary where arbitrary candidate code may raise anything
        traceback.print_exc()   # the whole trace in the worker's stderr (the parent keeps its tail)
        reason, detail = error_verdict(exc, report.violations)
        report.final({"ok": False, "reason": reason.value, "detail": detail})
    # Skip interpreter teardown: a corrupted CUDA context or candidate atexit code must not matter now.
    os._exit(0)


def main() -> None:
    serve(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])


if __name__ == "__main__":
    main()
