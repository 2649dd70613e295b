"""Rejection reason codes.  Every failed gate records exactly one of these (plus a human detail)."""

from __future__ import annotations

from enum import Enum


class Reason(str, Enum):
    # answer / static gate (no build, no GPU time)
    MALFORMED = "malformed"                      # no code, no entry point, syntax error
    FORBIDDEN_IMPORT = "forbidden_import"
    DYNAMIC_CODE = "dynamic_code"                # eval/exec/getattr-by-string/__import__ tricks
    SIDE_STREAM = "side_stream"
    THREAD_SPAWN = "thread_spawn"
    PROCESS_SPAWN = "process_spawn"
    MONKEYPATCH = "monkeypatch"                  # assigning into torch/time/timer objects
    TENSOR_SUBCLASS = "tensor_subclass"
    FILE_ACCESS = "file_access"
    NETWORK_ACCESS = "network_access"
    CUDA_GRAPH = "cuda_graph"
    CACHE_RESIDENCY = "cache_residency"          # L2 lines kept across calls (persisting set-aside, evict_last)
    NO_CUSTOM_KERNEL = "no_custom_kernel"        # work done by torch/ATen/cuBLAS instead of own kernel
    FORBIDDEN_FLAG = "forbidden_flag"            # a compiler/linker flag outside the allow list
    SHAPE_HARDCODED = "shape_hardcoded"
    # build
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    COMPILE_INTERRUPTED = "compile_interrupted"  # compiler killed from outside: says nothing of the source
    ARCH_MISMATCH = "arch_mismatch"              # built for archs the timer's GPU cannot run (no SASS, no PTX)
    # run (sandbox)
    CRASH = "crash"
    TIMEOUT = "timeout"                          # no verdict within the job's wall limit (eval.sandbox.timeout_s)
    HUNG = "hung"                                # a candidate call never returned: silent past the watchdog's limit
    OUT_OF_MEMORY = "out_of_memory"
    ILLEGAL_MEMORY_ACCESS = "illegal_memory_access"
    RUNTIME_ERROR = "runtime_error"
    SANDBOX_VIOLATION = "sandbox_violation"
    # correctness
    WRONG_OUTPUT_TYPE = "wrong_output_type"
    WRONG_SHAPE = "wrong_shape"
    WRONG_DTYPE = "wrong_dtype"
    WRONG_DEVICE = "wrong_device"
    NAN_OUTPUT = "nan_output"
    INCORRECT = "incorrect"
    INPUT_MUTATED = "input_mutated"
    NONDETERMINISTIC = "nondeterministic"
    TORCH_FALLBACK = "torch_fallback"            # dynamic: ATen compute ops ran during forward
    STALE_OUTPUT = "stale_output"                # a timed call's output was wrong (caching, skipping)
    OUT_OF_BOUNDS_WRITE = "out_of_bounds_write"  # guard bytes around outputs changed
    # timing
    ASYNC_ESCAPE = "async_escape"                # work escaped the timed region (side stream, deferral)
    TIMER_PATCHED = "timer_patched"
    UNSTABLE_MEASUREMENT = "unstable_measurement"   # correct, timing never settled (paid as its slowest, 1x at most)
    BASELINE_DRIFT = "baseline_drift"   # correct, baseline far off its record (paid as its slowest, 1x at most)
    FASTER_THAN_ROOFLINE = "faster_than_roofline"
    # task
    DEGENERATE_TASK = "degenerate_task"
    # pipeline (actors): the work was retried once on a restarted actor and failed again
    COMPILER_FAILED = "compiler_failed"
    TIMER_FAILED = "timer_failed"
    BASELINE_FAILED = "baseline_failed"


# Rejections by the defenses against reward hacking (DESIGN.md "Evaluation protocol"): every
# static-gate reason except `malformed` (a format error), the sandbox, the gates that catch cached,
# deferred or out-of-bounds work and torch fallback, and the timing gates. Left out: compile errors,
# crashes, timeouts and plain wrong results, which an honest but buggy kernel hits as often as a
# cheating one (a precision downgrade or partial computation fails as `incorrect` and cannot be
# told from a bug), plus degenerate tasks (a property of the task) and pipeline failures.
HACK_REASONS: frozenset[str] = frozenset(r.value for r in (
    Reason.FORBIDDEN_IMPORT, Reason.FORBIDDEN_FLAG, Reason.DYNAMIC_CODE, Reason.SIDE_STREAM, Reason.THREAD_SPAWN,
    Reason.PROCESS_SPAWN, Reason.MONKEYPATCH, Reason.TENSOR_SUBCLASS, Reason.FILE_ACCESS,
    Reason.NETWORK_ACCESS, Reason.CUDA_GRAPH, Reason.NO_CUSTOM_KERNEL, Reason.SHAPE_HARDCODED,
    Reason.SANDBOX_VIOLATION, Reason.TORCH_FALLBACK, Reason.STALE_OUTPUT, Reason.OUT_OF_BOUNDS_WRITE,
    Reason.ASYNC_ESCAPE, Reason.TIMER_PATCHED, Reason.FASTER_THAN_ROOFLINE,
))


class Rejected(Exception):
    """A check failed inside an evaluation process (worker, judge or runner); carries the reason code."""

    def __init__(self, reason: Reason, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


# How a `timer_patched` refusal of the split boundary's clock check starts: the evaluator measures
# such a candidate once more before refusing it (host load can push one honest window over).
CLOCK_GAP = "the runner's clock explains too little"
