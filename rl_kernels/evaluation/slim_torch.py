"""Slim torch headers for a module candidate's CUDA translation unit: the fast path of its build.

Why: `torch/extension.h` (what load_inline's CUDA sources include) is all of torch's C++ API, the
autograd, the nn modules and pybind11: ~18 MB once preprocessed, which nvcc parses three times (the
host preprocessing and cudafe++, the device front end, the host compile).  The softmax seed's CUDA
file took 75 s on the 2-core development machine, 17 s against these headers.  The kernels and
their host wrappers use a small part of that: at::Tensor and its methods, a few factory functions,
TORCH_CHECK, the dispatch macros, the current CUDA stream and the launch check (not the tensor
arithmetic operators: their header pulls in every operator, as much as the whole of ATen).

The slim headers are written into a directory searched before torch's own, under the names the
candidate includes (`torch/extension.h`, `torch/types.h`, `torch/all.h`, `ATen/ATen.h`,
`ATen/cuda/CUDAContext.h`), and include: `ATen/core/Tensor.h`, `ATen/Dispatch.h`, the c10 CUDA
stream, guard and launch-check headers, and for every `torch::NAME` or `at::NAME` in the source
that is an ATen operator, its own declaration header `ATen/ops/NAME.h`.  `torch::` is `at::` plus
torch's dtype constants, as `torch/types.h` makes it; the one difference is that `torch::` factory
functions are ATen's, without the autograd wrapper's `requires_grad` option (an inference kernel
never sets it).  Every declaration is torch's own, so what compiles calls the same functions in the
same libraries: the artifact is the one the full headers give.

What does not compile against them (a header or name they lack, see `TOO_SLIM`) is built again
against torch's own headers (`Build.path` "torch"); a candidate's own compile error is not.  A CUDA
file that defines its Python module or handles Python objects (`suits`) goes to torch's headers
from the start.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# A slim build's log says the candidate uses more of torch than these headers give.
TOO_SLIM = re.compile(
    r"namespace \"(?:at|c10|torch)(?:::\w+)*\" has no member"
    r"|identifier \"(?:py|pybind11|TORCH_\w+|AT_\w+|C10_\w+|THC\w*)\" is undefined"
    r"|name followed by \"::\" must be a class or namespace name"
    r"|no instance of (?:overloaded )?function \"(?:at|c10|torch)::"
    r"|operand types are: [^\n]*\b(?:at|c10)::\w+"
    r"|incomplete (?:class |type )*\"(?:at|c10|torch)::"
    r"|fatal error: (?:c10|ATen|torch|pybind11)/[\w/.]+: No such file or directory")

# A CUDA file that defines the Python module itself, or handles Python objects, needs torch/python.h.
_NEEDS_PYTHON = re.compile(r"\bPYBIND11_\w+|\bpy::|\bpybind11\b")

_PRELUDE = """#pragma once
// rl_kernels' slim torch headers (rl_kernels/evaluation/slim_torch.py): torch's own declarations,
// only those a CUDA kernel's translation unit uses.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <optional>
#include "rlk_slim_ops.h"

namespace torch {
using namespace at;  // NOLINT
using std::nullopt;  // NOLINT
using std::optional;  // NOLINT
using Dtype = at::ScalarType;
constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kUInt16 = at::kUInt16;
constexpr auto kUInt32 = at::kUInt32;
constexpr auto kUInt64 = at::kUInt64;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;
constexpr auto kU8 = kUInt8;
constexpr auto kU16 = kUInt16;
constexpr auto kU32 = kUInt32;
constexpr auto kU64 = kUInt64;
constexpr auto kI8 = kInt8;
constexpr auto kI16 = kInt16;
constexpr auto kI32 = kInt32;
constexpr auto kI64 = kInt64;
constexpr auto kF16 = kFloat16;
constexpr auto kF32 = kFloat32;
constexpr auto kF64 = kFloat64;
}  // namespace torch
"""

# The names a candidate includes, each standing for the slim prelude.
SHADOWED = ("torch/extension.h", "torch/types.h", "torch/all.h", "ATen/ATen.h", "ATen/cuda/CUDAContext.h")

_PRELUDE_NAME = "rlk_slim_torch.h"
_QUALIFIED = re.compile(r"\b(?:torch|at)\s*::\s*([a-z_][a-z0-9_]*)\s*(?:<[^;{}()]*>\s*)?\(")


def suits(sources: list[str]) -> bool:
    """False for CUDA sources that need Python (a `PYBIND11_MODULE` of their own, `py::` objects):
    those are built against torch's own headers from the start."""
    return not any(_NEEDS_PYTHON.search(text) for text in sources)


def operators_named(sources: list[str], include_roots: list[str]) -> list[str]:
    """The ATen operators `sources` call as `torch::NAME(...)` or `at::NAME(...)`: those with a
    declaration header `ATen/ops/NAME.h` under one of `include_roots`."""
    names = {m.group(1) for text in sources for m in _QUALIFIED.finditer(text)}
    return sorted(n for n in names if any((Path(root) / "ATen" / "ops" / f"{n}.h").is_file() for root in include_roots))


def write_headers(dest: Path, sources: list[str], include_roots: list[str]) -> None:
    """Writes the slim headers for `sources` under `dest` (then passed as `-I dest`, before torch's)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / _PRELUDE_NAME).write_text(_PRELUDE)
    ops = operators_named(sources, include_roots)
    (dest / "rlk_slim_ops.h").write_text("#pragma once\n" + "".join(f"#include <ATen/ops/{n}.h>\n" for n in ops))
    for name in SHADOWED:
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'#pragma once\n#include "{"../" * name.count("/")}{_PRELUDE_NAME}"\n')


def digest() -> str:
    """What the slim headers are made of (a build's cache key includes it)."""
    return hashlib.sha256("\0".join([_PRELUDE, *SHADOWED, _QUALIFIED.pattern, _NEEDS_PYTHON.pattern]).encode()).hexdigest()[:16]
