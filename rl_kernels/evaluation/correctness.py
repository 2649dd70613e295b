"""Output checks: exact type/shape/dtype/device, NaN, elementwise tolerance and relative-norm error.

The reference is computed in higher precision (fp64 for module tasks, fp32 for fp16 hgemm), so the
tolerances measure the candidate's own error, not the reference's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rl_kernels.config import CorrectnessConfig
from rl_kernels.evaluation.reasons import Reason


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    relnorm: float
    atol_rms_multiple: float = 0.0   # extra absolute slack as a multiple of rms(reference)


def dtype_tolerance(c: CorrectnessConfig, dtype: str) -> Tolerance:
    """The configured bounds for an output dtype ("float32", ...); an unlisted dtype gets float32's."""
    key = dtype if dtype in c.atol else "float32"
    return Tolerance(c.atol[key], c.rtol[key], c.relnorm[key], c.atol_rms_multiple.get(key, 0.0))


@dataclass(frozen=True)
class Comparison:
    reason: Reason | None
    detail: str = ""
    max_abs_err: float = 0.0
    rel_norm_err: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reason is None


def as_output_list(out: Any) -> list[Any]:
    """Module forward may return a tensor or a tuple/list of tensors; compare them position-wise."""
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def check_structure(outs: list[Any], expected: list[torch.Tensor]) -> Comparison:
    """Exact tensor type, count, shape, dtype, device: a lazy subclass or a view of the wrong shape fails here."""
    if len(outs) != len(expected):
        return Comparison(Reason.WRONG_SHAPE, f"returned {len(outs)} outputs, expected {len(expected)}")
    for i, (o, e) in enumerate(zip(outs, expected)):
        if type(o) is not torch.Tensor:
            return Comparison(Reason.WRONG_OUTPUT_TYPE, f"output {i} is {type(o).__name__}, not torch.Tensor")
        if o.shape != e.shape:
            return Comparison(Reason.WRONG_SHAPE, f"output {i} has shape {tuple(o.shape)}, expected {tuple(e.shape)}")
        if o.dtype != e.dtype:
            return Comparison(Reason.WRONG_DTYPE, f"output {i} has dtype {o.dtype}, expected {e.dtype}")
        if o.device != e.device:
            return Comparison(Reason.WRONG_DEVICE, f"output {i} is on {o.device}, expected {e.device}")
    return Comparison(None)


def compare_values(outs: list[torch.Tensor], refs: list[torch.Tensor], tol: Tolerance) -> Comparison:
    """Elementwise |c - r| <= atol + rtol |r| everywhere, and ||c - r|| / ||r|| <= relnorm."""
    worst_abs = 0.0
    worst_rel = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        c = o.detach().to(torch.float64)
        r = r.detach().to(device=c.device, dtype=torch.float64)
        ref_finite = torch.isfinite(r)
        bad = ~torch.isfinite(c) & ref_finite
        if bool(bad.any()):
            n = int(bad.sum())
            return Comparison(Reason.NAN_OUTPUT, f"output {i}: {n} non-finite values where the reference is finite")
        c = torch.where(ref_finite, c, torch.zeros_like(c))
        r = torch.where(ref_finite, r, torch.zeros_like(r))
        diff = (c - r).abs()
        rms = float(r.pow(2).mean().sqrt()) if r.numel() else 0.0
        allowed = tol.atol + tol.atol_rms_multiple * rms + tol.rtol * r.abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        ref_norm = float(torch.linalg.vector_norm(r))
        err_norm = float(torch.linalg.vector_norm(c - r))
        rel = err_norm / ref_norm if ref_norm > 0 else err_norm
        worst_abs = max(worst_abs, max_abs)
        worst_rel = max(worst_rel, rel)
        over = diff > allowed
        if bool(over.any()):
            idx = int(torch.argmax((diff - allowed).flatten()))
            return Comparison(
                Reason.INCORRECT,
                f"output {i}: {int(over.sum())}/{over.numel()} elements out of tolerance; worst at flat index "
                f"{idx}: got {float(c.flatten()[idx]):.6g}, expected {float(r.flatten()[idx]):.6g}",
                max_abs, rel,
            )
        if rel > tol.relnorm:
            return Comparison(
                Reason.INCORRECT,
                f"output {i}: relative-norm error {rel:.3g} exceeds {tol.relnorm:.3g} (precision too low?)",
                max_abs, rel,
            )
    return Comparison(None, "", worst_abs, worst_rel)


def snapshot(inputs: list[Any]) -> list[Any]:
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def unchanged(inputs: list[Any], snap: list[Any]) -> bool:
    """Every tensor input equals its snapshot exactly (NaNs in the same places count as equal)."""
    for x, s in zip(inputs, snap):
        if not isinstance(x, torch.Tensor):
            continue
        if x.is_floating_point():
            same = (x == s) | (torch.isnan(x) & torch.isnan(s))
            if not bool(same.all()):
                return False
        elif not torch.equal(x, s):
            return False
    return True
