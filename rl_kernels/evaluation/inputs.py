"""Fresh input sets drawn from several distributions.

A kernel that is only right for N(0,1) data (or that caches results keyed on input values) must be
caught, so every correctness check and every timed call gets inputs it has never seen, drawn from
one of: normal, uniform(-1,1), heavy-tailed (Student-t, 3 dof, clipped so fp16 cannot overflow) and
mixed-sign (rows with very different scales and signs).
"""

from __future__ import annotations

from typing import Any

import torch

DISTRIBUTIONS = ("normal", "uniform", "heavy_tailed", "mixed_sign")


def sample_like(t: torch.Tensor, dist: str, gen: torch.Generator) -> torch.Tensor:
    """A new tensor with t's shape/dtype/device whose floating values follow `dist`.

    Integer and boolean tensors are returned as copies: their values usually encode indices or
    shapes the task depends on, so they are kept as the task produced them.  The values are drawn
    on `gen`'s device, which must be t's (host-side sampling of a few million values per set, then
    a copy, was most of a GPU evaluation's correctness phase), in fp32 for tensors of fp32 or less
    (rounded once into t's dtype, as an fp64 draw would be) and fp64 for fp64 tensors: drawing
    fp32 tensors' values in fp64 doubled the cpu backend's cost of a set for nothing t can hold.
    """
    if not t.is_floating_point():
        return t.clone()
    draw = torch.float64 if t.dtype == torch.float64 else torch.float32
    shape, on = t.shape, {"generator": gen, "dtype": draw, "device": gen.device}
    if dist == "normal":
        x = torch.randn(shape, **on)
    elif dist == "uniform":
        x = torch.rand(shape, **on) * 2 - 1
    elif dist == "heavy_tailed":
        normal = torch.randn(shape, **on)
        chi2 = sum(torch.randn(shape, **on) ** 2 for _ in range(3))
        x = (normal / torch.sqrt(chi2 / 3 + 1e-12)).clamp_(-30, 30) / 3
    elif dist == "mixed_sign":
        x = torch.randn(shape, **on)
        if x.dim() >= 1 and x.shape[0] > 0:
            scale_shape = (shape[0],) + (1,) * (len(shape) - 1)
            scales = 10 ** (torch.rand(scale_shape, **on) * 2 - 1)
            signs = torch.where(torch.rand(scale_shape, **on) < 0.5, -1.0, 1.0)
            x = x.abs() * scales * signs + 0.1 * x
    else:
        raise ValueError(f"unknown input distribution {dist!r}; choose from {DISTRIBUTIONS}")
    return x.to(dtype=t.dtype, device=t.device)


def refill_(t: torch.Tensor, dist: str, gen: torch.Generator, scale: float = 1.0) -> None:
    """Overwrite a floating tensor in place with fresh values from `dist` times `scale`, generated
    on its device.

    Used before every timed call, so that the same buffer never holds the same values twice: an
    output cache keyed on pointers or on input values then returns stale results.  The common
    distributions take the scale in the same pass: this runs between timed calls, and every extra
    pass over a large input is GPU time that changes the clock regime the timed calls run in.
    """
    if dist == "normal":
        t.normal_(0.0, scale, generator=gen)
        return
    if dist == "uniform":
        t.uniform_(-scale, scale, generator=gen)
        return
    if dist == "heavy_tailed":
        denom = torch.empty_like(t, dtype=torch.float32).normal_(generator=gen).abs_().add_(0.05)
        t.copy_(torch.empty_like(denom).normal_(generator=gen).div_(denom).clamp_(-30, 30).mul_(scale / 3))
    elif dist == "mixed_sign":
        x = torch.empty_like(t, dtype=torch.float32).normal_(generator=gen)
        if x.dim() >= 1:
            scale_shape = (x.shape[0],) + (1,) * (x.dim() - 1)
            scales = torch.empty(scale_shape, device=t.device).uniform_(-1, 1, generator=gen)
            x.mul_(torch.pow(10.0, scales))
        t.copy_(x.mul_(scale))
    else:
        raise ValueError(f"unknown input distribution {dist!r}; choose from {DISTRIBUTIONS}")


def resample_inputs(inputs: list[Any], dist: str, seed: int) -> list[Any]:
    """Replace every floating tensor in `inputs` by fresh values from `dist` (others unchanged),
    each drawn on its own device from one generator per device seeded with `seed`."""
    gens: dict[torch.device, torch.Generator] = {}

    def gen_for(device: torch.device) -> torch.Generator:
        if device not in gens:
            gens[device] = torch.Generator(device=device).manual_seed(seed)
        return gens[device]

    return [sample_like(x, dist, gen_for(x.device)) if isinstance(x, torch.Tensor) else x for x in inputs]


def to_device(inputs: list[Any], device: str) -> list[Any]:
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def to_reference_precision(inputs: list[Any]) -> list[Any]:
    """fp64 copies of floating inputs: the reference is computed in higher precision."""
    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


def nbytes(inputs: list[Any]) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
