"""The hgemm task kind: CUDA-L2's half-precision GEMM grid, one task per (accumulator, M, N, K).

A task id is ``hgemm/{acc}/{M}_{N}_{K}`` (e.g. ``hgemm/fp32/4096_4096_4096``).  The suite is
CUDA-L2's grid, every (M, N, K) in HGEMM_SIZES^3 times both accumulators = 2000 tasks, but any
positive M, N, K parses, so a user can add shapes (odd ones included: the seeds handle any shape,
and a candidate that assumes tile multiples simply fails correctness on a shape it does not fit).
Ids are canonical (no leading zeros, no signs) so that id -> spec -> id round-trips exactly and two
spellings never name the same task in the archive.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from typing import Literal, cast

import torch

from rl_kernels.types import HgemmSpec, Task

Accumulator = Literal["fp16", "fp32"]

HGEMM_SIZES: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
ACCUMULATORS: tuple[Accumulator, ...] = ("fp16", "fp32")

_ID_RE = re.compile(r"hgemm/(?P<acc>[^/]+)/(?P<dims>[^/]+)")
_DIM_RE = re.compile(r"[1-9][0-9]*")


def hgemm_id(spec: HgemmSpec) -> str:
    return f"hgemm/{spec.accumulator}/{spec.m}_{spec.n}_{spec.k}"


def parse_hgemm_id(task_id: str) -> HgemmSpec:
    """Parse ``hgemm/{fp16|fp32}/{M}_{N}_{K}``; the error says which part is wrong."""
    match = _ID_RE.fullmatch(task_id)
    if match is None:
        raise ValueError(f"hgemm task id {task_id!r} must look like 'hgemm/fp32/4096_4096_4096'")
    acc = match["acc"]
    if acc not in ACCUMULATORS:
        raise ValueError(f"hgemm task id {task_id!r}: accumulator {acc!r} must be one of {ACCUMULATORS}")
    dims = match["dims"].split("_")
    if len(dims) != 3:
        raise ValueError(f"hgemm task id {task_id!r}: expected three sizes M_N_K, got {len(dims)}")
    for name, text in zip("MNK", dims, strict=True):
        if _DIM_RE.fullmatch(text) is None:
            raise ValueError(
                f"hgemm task id {task_id!r}: {name}={text!r} must be a positive integer without "
                "sign or leading zeros"
            )
    m, n, k = (int(d) for d in dims)
    return HgemmSpec(m=m, n=n, k=k, accumulator=cast(Accumulator, acc))


def _seed_source(name: str) -> str:
    return (resources.files("rl_kernels.tasks") / "builtin" / "hgemm" / name).read_text()


def hgemm_seeds(accumulator: Accumulator) -> dict[str, str]:
    """Plain, correct starting kernels per backend; the accumulator decides which pair."""
    return {
        "cuda": _seed_source(f"seed_cuda_{accumulator}.cu"),
        "cpu": _seed_source(f"seed_cpu_{accumulator}.cpp"),
    }


def _make_task(spec: HgemmSpec, seeds: dict[str, str]) -> Task:
    acc_text = "fp16 (every partial sum rounded to half)" if spec.accumulator == "fp16" else "fp32"
    description = (
        f"C[{spec.m}x{spec.n}] = A[{spec.m}x{spec.k}] . B[{spec.k}x{spec.n}], fp16 inputs and "
        f"output, accumulate in {acc_text}. A and B are row-major; b_col_major holds B^T "
        f"contiguously ({spec.n}x{spec.k}, K fastest) in a tensor of shape ({spec.k}, {spec.n})."
    )
    return Task(id=hgemm_id(spec), kind="hgemm", hgemm=spec, seeds=seeds, description=description)


def hgemm_task(task_id: str) -> Task:
    spec = parse_hgemm_id(task_id)
    return _make_task(spec, hgemm_seeds(spec.accumulator))


def hgemm_suite(accumulators: Iterable[Accumulator] = ACCUMULATORS) -> list[Task]:
    """CUDA-L2's grid (1000 shapes per accumulator), accumulator-major then M, N, K ascending."""
    accs = tuple(accumulators)
    for acc in accs:
        if acc not in ACCUMULATORS:
            raise ValueError(f"accumulator {acc!r} must be one of {ACCUMULATORS}")
    seeds = {acc: hgemm_seeds(acc) for acc in accs}
    tasks = []
    for acc in accs:
        for m in HGEMM_SIZES:
            for n in HGEMM_SIZES:
                for k in HGEMM_SIZES:
                    spec = HgemmSpec(m=m, n=n, k=k, accumulator=acc)
                    tasks.append(_make_task(spec, seeds[acc]))
    return tasks


def hgemm_reference(a: torch.Tensor, b: torch.Tensor, accumulator: Accumulator) -> torch.Tensor:
    """The fp32 product a.float() @ b.float(), used as the reference for *both* accumulators.

    An fp16-accumulate kernel's result depends on its summation order (tile shape, split-K), so
    there is no single "right" fp16-accumulated answer to compare against; instead the fp16 task is
    judged against the exact-ish fp32 product with a looser, K-dependent relative-norm tolerance
    (correctness.hgemm_fp16_acc_relnorm_per_sqrt_k), which is what makes the accumulator checkable:
    an fp32-accumulate kernel passes both, and an fp16 kernel submitted for an fp32 task fails.
    """
    if accumulator not in ACCUMULATORS:
        raise ValueError(f"accumulator {accumulator!r} must be one of {ACCUMULATORS}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"hgemm_reference needs A[MxK] and B[KxN], got {tuple(a.shape)} and {tuple(b.shape)}")
    return a.float() @ b.float()
