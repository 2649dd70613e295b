"""The kernels a run found, used from PyTorch: `rl_kernels.ops.hgemm(a, b)` over a library that
`rl-kernels export` wrote.

    import rl_kernels.ops as ops
    ops.use("exported/rlk_hgemm_cuda/rlk_hgemm_cuda")   # checked against this host (LibraryError)
    c = ops.hgemm(a, b)                                 # the library's op (below)
    with ops.patch_linear(model):                       # fp16 nn.Linear layers through the op
        y = model(x)
    ops.explain()                                       # per shape: the path, its measurements, calls

The op is the library's C++ dispatch (`<package>_cpp::hgemm`, built at export against that torch
version) where it loads, else the Python dispatch `rl_kernels::hgemm` (`active().native_reason`).

The op is registered on first use, so importing this package (the evaluator's workers import the
kernel loader from `runtime`) registers nothing.  An exported package carries its own copy of
`runtime` and its own op (`<package>::hgemm`); it does not need rl_kernels installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from rl_kernels.ops.runtime import Choice, KernelLibrary, LibraryError, patch_linear as _patch_linear, register_op

__all__ = ["Choice", "KernelLibrary", "LibraryError", "active", "explain", "hgemm", "patch_linear", "use"]

OP_NAME = "rl_kernels::hgemm"
_state: dict[str, Any] = {}


def use(root: str | Path, *, allow_other_cpu: bool = False) -> KernelLibrary:
    """Loads the library at `root` (the package directory holding manifest.json) for every later call."""
    library = KernelLibrary(root, allow_other_cpu=allow_other_cpu)
    _state["library"] = library
    return library


def active() -> KernelLibrary:
    library = _state.get("library")
    if library is None:
        raise LibraryError("no kernel library in use: call rl_kernels.ops.use(DIR) with a directory that "
                           "rl-kernels export wrote")
    return library


def _op() -> Any:
    """The C++ dispatch of the active library where it loads (no Python per call), else the Python one."""
    native = active().native_op()
    if native is not None:
        return native
    if "op" not in _state:
        _state["op"] = register_op(OP_NAME, active)
    return _state["op"]


def hgemm(a: torch.Tensor, b: torch.Tensor, b_col_major: torch.Tensor | None = None,
          accumulator: str = "fp32") -> torch.Tensor:
    """a @ b for a: [M, K], b: [K, N] float16, through the library's plan (see runtime.KernelLibrary)."""
    return _op()(a, b, b_col_major, accumulator)


def explain() -> list[dict[str, Any]]:
    return active().explain()


@contextlib.contextmanager
def patch_linear(model: torch.nn.Module) -> Iterator[int]:
    """fp16 nn.Linear layers of `model` through the op inside the block (runtime.patch_linear)."""
    with _patch_linear(model, active(), _op()) as patched:
        yield patched
