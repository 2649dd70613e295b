"""The words of a static-gate refusal: what in the file triggered it, why, and what to do about it.

Users bring kernels written for other evaluators (KernelBench solutions, CUDA-L1's released code),
and a bare reason code leaves them guessing.  Every finding therefore reads as one line,
"<where>: `<construct>` — <why the gate refuses it>; <what to change, or which setting accepts it>",
and a refusal lists its findings most serious first.  The sentences per reason live here so that
the Python gate, the C++ scanner and the build say the same thing about the same construct.
"""

from __future__ import annotations

from rl_kernels.evaluation.reasons import Reason

NO_SETTING = "no setting accepts it"
ALLOW_TORCH = ("set eval.allow_torch_rewrites=true to accept torch rewrites (their speedups are then torch's, "
               "and the file must still build one load_inline extension)")
TORCH_FIX = "move the computation into your kernel, or " + ALLOW_TORCH
MAX_LINES = 12

# Per reason: why the gate refuses such a construct (one sentence) and the default remedy.
REASON_TEXT: dict[Reason, tuple[str, str]] = {
    Reason.MALFORMED: ("the evaluator cannot find what it is to run",
                       f"fix the file's structure — {NO_SETTING}"),
    Reason.FORBIDDEN_IMPORT: ("imports are limited to torch, torch.nn, torch.nn.functional, "
                              "torch.utils.cpp_extension (load_inline), math and typing, since other modules "
                              "touch files, processes or the environment (os/sys/subprocess...)",
                              f"remove the import — {NO_SETTING}"),
    Reason.DYNAMIC_CODE: ("code built or reached at run time (eval/exec, reflection, dunders, private torch "
                          "APIs) hides what runs from the gate",
                          f"write the code out literally — {NO_SETTING}"),
    Reason.SIDE_STREAM: ("work on another stream escapes the timed region, which covers the current stream only",
                         f"launch on the current stream (at::cuda::getCurrentCUDAStream()) — {NO_SETTING}"),
    Reason.THREAD_SPAWN: ("a thread keeps working outside the timed call",
                          f"remove it and parallelise inside your kernel (at::parallel_for on cpu) — {NO_SETTING}"),
    Reason.PROCESS_SPAWN: ("a candidate may not start, signal or trace processes, nor load native code at run time",
                           f"remove it — {NO_SETTING}"),
    Reason.MONKEYPATCH: ("changing objects the candidate did not create (torch, the timer, the RNG, the "
                         "environment) changes how it is judged",
                         f"change only your own objects — {NO_SETTING}"),
    Reason.TENSOR_SUBCLASS: ("a tensor subclass or dispatch override changes what torch does, in the checks too",
                             f"return plain tensors — {NO_SETTING}"),
    Reason.FILE_ACCESS: ("a candidate may not touch files, processes or the environment outside its build",
                         f"remove it (os.environ reads included) — {NO_SETTING}"),
    Reason.NETWORK_ACCESS: ("a candidate may not reach the network", f"remove it — {NO_SETTING}"),
    Reason.CUDA_GRAPH: ("a captured CUDA graph replays work the timer never sees launched",
                        f"launch your kernels directly — {NO_SETTING}"),
    Reason.CACHE_RESIDENCY: ("lines kept resident in L2 across calls (the persisting set-aside, an evict_last or "
                             "other cache policy) survive the flush before each timed call, so the next call "
                             "reads a warm cache the protocol rules out",
                             f"load and store with default caching: every timed call starts from a flushed L2 — "
                             f"{NO_SETTING}"),
    Reason.NO_CUSTOM_KERNEL: ("torch or a library does the work instead of your kernel", TORCH_FIX),
    Reason.FORBIDDEN_FLAG: ("compiler and linker flags are limited to an allow list (rl_kernels/evaluation/flags.py)",
                            f"drop the flag — {NO_SETTING}"),
    Reason.STALE_OUTPUT: ("a mutable function-local static persists state across calls, the idiom of cached "
                          "outputs and skipped work",
                          f"make it const/constexpr or a plain local — {NO_SETTING}"),
}


def place(line: int, where: str) -> str:
    """`line 12` for the Python file or an hgemm source, `line 8 of cuda_sources[0] (python line 30)` for
    a load_inline source: the line a user opens their editor at."""
    if where in ("python", "source"):
        return f"line {line}"
    return f"line {line} of {where}"


def finding_line(reason: Reason, line: int, where: str, token: str, why: str = "", fix: str = "") -> str:
    """One finding as one line; an empty `why` or `fix` takes the reason's default sentence."""
    default_why, default_fix = REASON_TEXT.get(reason, ("", ""))
    return f"{place(line, where)}: `{token}` — {why or default_why}; {fix or default_fix}"


def joined(lines: list[str]) -> str:
    """The lines of a refusal, already most serious first: duplicates dropped, at most MAX_LINES kept
    (a file failing everywhere would otherwise bury the first finding under the rest)."""
    unique = list(dict.fromkeys(lines))
    shown = unique[:MAX_LINES]
    rest = len(unique) - len(shown)
    return "\n".join(shown + ([f"... and {rest} more finding(s)"] if rest else []))
