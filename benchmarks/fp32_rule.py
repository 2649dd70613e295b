"""What fp32-accurate GEMMs reach against the evaluator's fp32 rule: the calibration of `relnorm.float32`.

For N x N x N fp32 matmuls (the built-in `matmul` task's shape scaled to each N) and every input
distribution the evaluator draws (rl_kernels/evaluation/inputs.py), each implementation's output is
compared with the fp64 product exactly as the evaluator compares a module task's output
(`compare_values` with the configured float32 tolerance): the relative-norm error, the worst
elementwise excess, and whether the current rule accepts it. Implementations:

- `fp32 cuBLAS`: torch.matmul with TF32 off (cuda); on cpu, torch's fp32 matmul;
- `1xTF32 cuBLAS`: torch.matmul with TF32 on (cuda); on cpu, operands rounded to TF32 (10-bit
  mantissa, round to nearest) then an fp32 matmul: the same products, another summation order;
- `3xTF32 split`: a = big + small with big = tf32(a), three TF32 products big.big + big.small +
  small.big accumulated in fp32 (TF32 matmuls on cuda, the emulation above on cpu);
- `3xTF32 CUTLASS` / `1xTF32 CUTLASS` (cuda, with nvcc): `benchmarks/fp32_rule_cutlass.cu`, CUTLASS's
  OpMultiplyAddFastF32 and OpMultiplyAdd tensor-core GEMMs built against the nvidia-cutlass wheel's
  headers.

The rule to set is one that every fp32-accurate implementation passes (fp32, 3xTF32) and every 1xTF32
one fails, with a margin on both sides: the table prints each row's error against the bound.

    python benchmarks/fp32_rule.py [--device cuda] [--n 1024 2048 4096] [--sets 2] [--out fp32_rule.json] [overrides...]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.evaluation.correctness import compare_values, dtype_tolerance  # noqa: E402
from rl_kernels.evaluation.inputs import DISTRIBUTIONS, sample_like  # noqa: E402

Gemm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def tf32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32 (8-bit exponent, 10-bit mantissa), round to nearest on the magnitude, kept
    in fp32: what a TF32 tensor core reads of an fp32 operand."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _matmul(tf32_on: bool) -> Gemm:
    def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.is_cuda:
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32_on
            try:
                return a @ b
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before
        return tf32(a) @ tf32(b) if tf32_on else a @ b
    return gemm


def split_3xtf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    one = _matmul(True)
    a_big, b_big = tf32(a), tf32(b)
    a_small, b_small = a - a_big, b - b_big
    return one(a_big, b_small) + one(a_small, b_big) + one(a_big, b_big)


def cutlass_gemms(work: Path) -> dict[str, Gemm]:
    """CUTLASS's 3xTF32 and 1xTF32 GEMMs, built once with nvcc; empty (and why) when they cannot be."""
    try:
        import cutlass_library
    except ImportError:
        print("CUTLASS rows skipped: the nvidia-cutlass wheel is not installed", flush=True)
        return {}
    include = Path(cutlass_library.__file__).parent / "source" / "include"
    lib = work / "fp32_rule_cutlass.so"
    src = Path(__file__).with_name("fp32_rule_cutlass.cu")
    cmd = ["nvcc", "-O3", "-std=c++17", "-arch=sm_90a", "-shared", "-Xcompiler", "-fPIC", f"-I{include}",
           str(src), "-o", str(lib)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"CUTLASS rows skipped: nvcc failed:\n{done.stderr[-2000:]}", flush=True)
        return {}
    so = ctypes.CDLL(str(lib))

    def bind(name: str) -> Gemm:
        fn = getattr(so, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3

        def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            a, b = a.contiguous(), b.contiguous()
            c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=torch.float32)
            status = fn(a.data_ptr(), b.data_ptr(), c.data_ptr(), a.shape[0], b.shape[1], a.shape[1])
            torch.cuda.synchronize()
            if status != 0:
                raise RuntimeError(f"{name} returned status {status}")
            return c
        return gemm

    return {"3xTF32 CUTLASS": bind("gemm_3xtf32"), "1xTF32 CUTLASS": bind("gemm_1xtf32")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 2048, 4096], help="M = N = K of each matmul")
    ap.add_argument("--sets", type=int, default=2, help="input sets per distribution")
    ap.add_argument("--out", type=Path, help="write every row as JSON here")
    ap.add_argument("overrides", nargs="*", help="config overrides (eval.correctness.relnorm.float32=...)")
    args = ap.parse_args()
    cfg = load_config(None, args.overrides)
    tol = dtype_tolerance(cfg.eval.correctness, "float32")
    gemms: dict[str, Gemm] = {"fp32 cuBLAS": _matmul(False), "1xTF32 cuBLAS": _matmul(True),
                              "3xTF32 split": split_3xtf32}
    if args.device == "cuda":
        gemms.update(cutlass_gemms(Path(tempfile.mkdtemp(prefix="fp32_rule_"))))
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({os.cpu_count()} cores)"
    print(f"fp32 matmuls {', '.join(f'{n}^3' for n in args.n)} on {where}; the rule: relnorm <= {tol.relnorm:g}, elementwise "
          f"|c - r| <= {tol.atol:g} + {tol.atol_rms_multiple:g} rms(r) + {tol.rtol:g} |r|", flush=True)
    rows = []
    gen = torch.Generator(device=args.device)
    for n in args.n:
        template = torch.empty(n, n, dtype=torch.float32, device=args.device)
        for dist in DISTRIBUTIONS:
            for s in range(args.sets):
                gen.manual_seed(1000 * DISTRIBUTIONS.index(dist) + s)
                a, b = sample_like(template, dist, gen), sample_like(template, dist, gen)
                ref = a.double() @ b.double()
                for name, gemm in gemms.items():
                    cmp = compare_values([gemm(a, b)], [ref], tol)
                    rows.append({"implementation": name, "n": n, "distribution": dist, "set": s,
                                 "rel_norm_err": cmp.rel_norm_err, "max_abs_err": cmp.max_abs_err,
                                 "accepted": cmp.reason is None, "why": cmp.detail[:160]})
    print(f"\n| implementation | N | relative-norm error, worst over {len(DISTRIBUTIONS)} distributions x "
          f"{args.sets} sets (its distribution) | x the bound | accepted by the current rule |")
    print("|---|---|---|---|---|")
    for name in gemms:
        for n in args.n:
            mine = [r for r in rows if r["implementation"] == name and r["n"] == n]
            worst = max(mine, key=lambda r: r["rel_norm_err"])
            ok = sum(r["accepted"] for r in mine)
            print(f"| {name} | {n} | {worst['rel_norm_err']:.3g} ({worst['distribution']}) | "
                  f"{worst['rel_norm_err'] / tol.relnorm:.2f} | {ok}/{len(mine)} |")
    if args.out:
        args.out.write_text(json.dumps({"device": where, "sizes": args.n, "relnorm_bound": tol.relnorm,
                                        "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
