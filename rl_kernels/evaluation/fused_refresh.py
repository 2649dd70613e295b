"""Fresh GEMM inputs in one pass on the GPU: A, B and B's column-major copy from a counter-based RNG.

Every timed HGEMM call gets new input values (a value- or pointer-keyed output cache must not
earn a speedup).  Done with torch ops, that is a Philox pass per input plus a transposed copy of B
(read B, write B^T): for 8192^3 about 640 MB of traffic between two 1.6 ms GEMMs, enough to change
the power-limited GPU's clock regime and to make the timed GEMM read ~9% faster than triton's
do_bench (docs/EVALUATOR.md, "Fidelity").  Here each value is generated from (seed, index) in
registers and written once, to B and to B^T from the same registers: writes only, no reads.

The distributions are the same as `inputs.refill_` (normal, uniform, heavy-tailed, mixed-sign),
up to the RNG stream.  Needs triton (shipped with CUDA builds of torch); `available()` says
whether this path can run.
"""

from __future__ import annotations

import math

import torch

try:
    import triton
    import triton.language as tl
except ModuleNotFoundError:   # CPU builds of torch ship no triton; the torch path is used there
    triton = None

_DIST_CODES = {"normal": 0, "uniform": 1, "heavy_tailed": 2, "mixed_sign": 3}
_LOG2_10 = math.log2(10.0)
_BLOCK = 64


def available(t: torch.Tensor) -> bool:
    """True when `t` is a CUDA tensor and triton is importable."""
    return triton is not None and t.is_cuda


if triton is not None:

    @triton.jit
    def _fill(out_ptr, out_t_ptr, rows, cols, seed, scale, log2_10,
              DIST: tl.constexpr, TRANSPOSED: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[:, None]    # [BLOCK, 1]
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)[None, :]    # [1, BLOCK]
        mask = (r < rows) & (c < cols)
        idx = r * cols + c                                              # [BLOCK, BLOCK]
        if DIST == 0:
            x = tl.randn(seed, idx)
        elif DIST == 1:
            x = tl.rand(seed, idx) * 2.0 - 1.0
        elif DIST == 2:
            # Student-like heavy tail: normal / (|normal| + 0.05), clipped so fp16 cannot overflow.
            x = tl.randn(seed, idx) / (tl.abs(tl.randn(seed + 1, idx)) + 0.05)
            x = tl.minimum(tl.maximum(x, -30.0), 30.0) / 3.0
        else:
            # Rows of very different scales: each row times 10^U(-1, 1).
            row_u = tl.rand(seed + 2, r) * 2.0 - 1.0                    # [BLOCK, 1]
            x = tl.randn(seed, idx) * tl.exp2(row_u * log2_10)
        x = (x * scale).to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + idx, x, mask=mask)
        if TRANSPOSED:
            tl.store(out_t_ptr + c * rows + r, x, mask=mask)


def fill_(out: torch.Tensor, dist: str, seed: int, scale: float = 1.0,
          transposed_copy: torch.Tensor | None = None) -> None:
    """Overwrite the 2-D contiguous `out` with fresh values; if given, write `out`'s transpose into
    `transposed_copy` (a contiguous [cols, rows] buffer) in the same pass.

    `seed` selects the stream (callers draw a new one per refresh on the host, so nothing waits on
    the GPU and refreshes can be queued between timed calls).
    """
    if dist not in _DIST_CODES:
        raise ValueError(f"unknown input distribution {dist!r}; choose from {tuple(_DIST_CODES)}")
    if out.dim() != 2 or not out.is_contiguous():
        raise ValueError(f"fused refresh needs a contiguous 2-D tensor, got shape {tuple(out.shape)}")
    rows, cols = out.shape
    if rows * cols >= 2**31:
        raise ValueError(f"fused refresh indexes with int32; {rows}x{cols} is too large")
    if transposed_copy is not None and (transposed_copy.numel() != out.numel()
                                        or not transposed_copy.is_contiguous()):
        raise ValueError("transposed_copy must be a contiguous buffer with as many elements as out")
    grid = (triton.cdiv(rows, _BLOCK), triton.cdiv(cols, _BLOCK))
    _fill[grid](out, transposed_copy if transposed_copy is not None else out, rows, cols,
                seed, float(scale), _LOG2_10, DIST=_DIST_CODES[dist],
                TRANSPOSED=transposed_copy is not None, BLOCK=_BLOCK)
