"""Capture step of module builds: learn what a KernelBench-style candidate asks load_inline to build.

The candidate's module top level runs in a process of its own with `torch.utils.cpp_extension.load_inline`
replaced by a recorder: forked from a fork server that imported torch once (`serve_forked`, under
`isolation: namespaces`; see `build._forked_capture`), or a new one (`python -m
rl_kernels.evaluation.capture`, source on stdin, one JSON object on stdout).  Why a process:
top-level code is untrusted and may hang, crash or attack the build host; it runs confined like an evaluation (`confine.py`: namespaces, read-only host, a
seccomp filter before the candidate's first line) and the build then accepts only sources the
static gate saw.  The top level first: that is where KernelBench candidates call load_inline.
When it calls none, ModelNew is constructed from the candidate's own `get_init_inputs()` (as
CUDA-L1's released kernels do, 19 of 70 in their constructor; `_construct`); calls made in forward
cannot be captured.  The process sees no GPU (CUDA_VISIBLE_DEVICES="").
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from rl_kernels.evaluation import confine

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class CaptureError(Exception):
    """The candidate's load_inline use cannot be built ahead of time; the message says why."""


class _NotBuiltYet:
    """Returned by the recorder instead of a module: any function on it raises if called."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        def _unavailable(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"extension {self._name!r} is not built during capture; {attr}() cannot run")

        return _unavailable


def _as_str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise CaptureError(f"load_inline {what} must be a string or a list of strings, got {type(value).__name__}")


def _functions(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return {value: value}
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return {f: f for f in value}
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    raise CaptureError(f"load_inline functions must be a list or dict of names, got {type(value).__name__}")


def normalize_call(real_load_inline: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Binds one load_inline call to torch's signature and reduces it to JSON-able build inputs."""
    try:
        bound = inspect.signature(real_load_inline).bind(*args, **kwargs)
    except TypeError as exc:
        raise CaptureError(f"load_inline called with bad arguments: {exc}") from None
    bound.apply_defaults()
    a = bound.arguments
    name = a["name"]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise CaptureError(f"load_inline name must be a C identifier, got {name!r}")
    if a.get("sycl_sources"):
        raise CaptureError("load_inline sycl_sources are not supported")
    if not a.get("is_python_module", True):
        raise CaptureError("load_inline(is_python_module=False) is not supported")
    with_cuda = a.get("with_cuda")
    return {
        "name": name,
        "cpp_sources": _as_str_list(a["cpp_sources"], "cpp_sources"),
        "cuda_sources": _as_str_list(a.get("cuda_sources"), "cuda_sources"),
        "functions": _functions(a.get("functions")),
        "extra_cflags": _as_str_list(a.get("extra_cflags"), "extra_cflags"),
        "extra_cuda_cflags": _as_str_list(a.get("extra_cuda_cflags"), "extra_cuda_cflags"),
        "extra_ldflags": _as_str_list(a.get("extra_ldflags"), "extra_ldflags"),
        "extra_include_paths": _as_str_list(a.get("extra_include_paths"), "extra_include_paths"),
        "with_cuda": None if with_cuda is None else bool(with_cuda),
        "with_pytorch_error_handling": bool(a.get("with_pytorch_error_handling", True)),
        "no_implicit_headers": bool(a.get("no_implicit_headers", False)),
    }


def _run_candidate(source: str) -> dict[str, Any]:
    import torch.utils.cpp_extension as cpp_extension

    real_load_inline = cpp_extension.load_inline
    calls: list[dict[str, Any]] = []
    problems: list[str] = []

    def recording_load_inline(*args: Any, **kwargs: Any) -> _NotBuiltYet:
        try:
            call = normalize_call(real_load_inline, args, kwargs)
        except CaptureError as exc:
            problems.append(str(exc))
            return _NotBuiltYet(str(kwargs.get("name", args[0] if args else "?")))
        calls.append(call)
        return _NotBuiltYet(call["name"])

    def refusing_load(*args: Any, **kwargs: Any) -> _NotBuiltYet:
        problems.append("torch.utils.cpp_extension.load (sources from files) is not supported; use load_inline")
        return _NotBuiltYet(str(kwargs.get("name", args[0] if args else "?")))

    cpp_extension.load_inline = recording_load_inline
    cpp_extension.load = refusing_load
    module = types.ModuleType("candidate")
    module.__file__ = "<candidate>"
    sys.modules["candidate"] = module
    confine.forbid_process_creation()   # from here on, fork/exec/ptrace/... kill the process
    try:
        exec(compile(source, "<candidate>", "exec"), module.__dict__)
    except SystemExit as exc:
        return {"ok": False, "error": f"candidate called exit({exc.code}) at import time"}
    except Exception:  # noqa: BLE001 - untrusted code may raise anything; it is reported verbatim
        return {"ok": False, "error": "candidate top-level code raised (it runs without a GPU to find the "
                "load_inline calls; guard GPU-only work with torch.cuda.is_available() or move it into forward):\n"
                + traceback.format_exc(limit=8)}
    constructed = ""
    if not calls and not problems:
        constructed = _construct(module.__dict__)
    if problems:
        return {"ok": False, "error": "\n".join(problems)}
    if not calls:
        return {"ok": False, "error": "no torch.utils.cpp_extension.load_inline call at module top level or while "
                "constructing ModelNew(*get_init_inputs()) — every candidate builds its kernels ahead of time, "
                "eval.allow_torch_rewrites included (it accepts torch ops beside a kernel, not a ModelNew of "
                "torch ops alone); call load_inline at module top level or in ModelNew.__init__ (a call made in "
                "forward cannot be built ahead of time)"
                + (f"; constructing it: {constructed}" if constructed else "")}
    return {"ok": True, "calls": calls}


def _construct(namespace: dict[str, Any]) -> str:
    """Constructs the candidate's ModelNew from its own get_init_inputs(), as on the GPU, so the
    load_inline calls its constructor makes are recorded too.  `torch.cuda.is_available()` says
    True meanwhile: the evaluation runs on the device, and candidates often build their extension
    only when it is there.  Returns "" or why construction stopped (calls recorded before that
    count: the evaluation constructs the model again, with the built extensions)."""
    import torch

    model_new, init_inputs = namespace.get("ModelNew"), namespace.get("get_init_inputs")
    if not callable(model_new) or not callable(init_inputs):
        return "the candidate defines no ModelNew and get_init_inputs() to construct it with"
    available = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        model_new(*init_inputs())
    except SystemExit as exc:
        return f"it called exit({exc.code})"
    except Exception as exc:  # noqa: BLE001 - untrusted code may raise anything; it is reported
        return f"{type(exc).__name__}: {exc}"[:500]
    finally:
        torch.cuda.is_available = available
    return ""


def serve_forked(source_path: Path, result_fd: int) -> None:
    """The capture in a child of a fork server (`forkserver`, role "capture"), already confined:
    reads the candidate from `source_path`, writes one JSON object to `result_fd`, and exits
    without the interpreter's teardown (candidate atexit code must not run).  Its stdout and
    stderr are already its scratch dir's stderr.txt."""
    result = _run_candidate(source_path.read_text())
    with os.fdopen(result_fd, "w") as out:
        out.write(json.dumps(result))
    os._exit(0)


def main() -> None:
    """Reads the candidate on stdin, writes one JSON object on the real stdout.

    The candidate's own prints (Python and C level) are redirected to stderr so they cannot corrupt
    the JSON.
    """
    source = sys.stdin.read()
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    result = _run_candidate(source)
    with os.fdopen(result_fd, "w") as out:
        out.write(json.dumps(result))


if __name__ == "__main__":
    main()
