"""The exported op against torch.matmul: per planned shape, what dispatch costs, and a model end to end.

    python benchmarks/export_op.py --package OUT/rlk_hgemm_cuda [--device cuda] [--reps 100]

Prints three tables:
  1. per plan entry: the op's median ms (through `KernelLibrary.hgemm`, padding included) beside
     torch.matmul's, measured now, interleaved, and the decision export recorded;
  2. dispatch overhead on the smallest exact shape: the registered op (torch.library, Python), the
     library call without the op, the bare kernel entry (ctypes) on prepared buffers, torch.matmul;
  3. a small transformer (fp16 Linear layers of the planned sizes) forward, stock vs `patch_linear`,
     and the largest output difference.
Medians of interleaved calls (`rl_kernels.ops.export.time_pair`: CUDA events on a GPU, the wall
clock on a CPU); beside them, on a GPU, triton's do_bench of the same two calls when triton is there.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

from rl_kernels.ops.export import time_pair
from rl_kernels.ops.runtime import KernelLibrary, register_op


def do_bench_ms(fn, device: torch.device) -> float | None:
    """triton's do_bench median (an independent timer), or None off the GPU or without triton."""
    if device.type != "cuda" or importlib.util.find_spec("triton") is None:
        return None
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median"))


def plan_table(lib: KernelLibrary, device: torch.device, warmup: int, reps: int) -> None:
    print("| M | N | K | acc | path at export | speedup at export | op ms | torch.matmul ms | speedup now | do_bench op / matmul ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    counts: dict[str, int] = {}
    for e in lib.manifest["plan"]:
        counts[e["path"]] = counts.get(e["path"], 0) + 1
        a = torch.randn((e["m"], e["k"]), device=device).half()
        b = torch.randn((e["k"], e["n"]), device=device).half()
        op_ms, mm_ms = time_pair(lambda: lib.hgemm(a, b, accumulator=e["accumulator"]), lambda: torch.matmul(a, b),
                                 device, warmup, reps)
        db = (do_bench_ms(lambda: lib.hgemm(a, b, accumulator=e["accumulator"]), device),
              do_bench_ms(lambda: torch.matmul(a, b), device))
        dbs = f"{db[0]:.4f} / {db[1]:.4f}" if db[0] is not None else "-"
        print(f"| {e['m']} | {e['n']} | {e['k']} | {e['accumulator']} | {e['path']} | {e.get('speedup') or '-'} | "
              f"{op_ms:.4f} | {mm_ms:.4f} | {mm_ms / op_ms:.3f} | {dbs} |")
    print("paths: " + ", ".join(f"{counts.get(p, 0)} {p}" for p in ("exact", "pad", "matmul")))


def overhead_table(lib: KernelLibrary, device: torch.device, warmup: int, reps: int) -> None:
    exact = [e for e in lib.manifest["plan"] if e["path"] == "exact"]
    if not exact:
        print("no exact shape in the plan: no dispatch overhead to measure")
        return
    e = min(exact, key=lambda p: p["m"] * p["n"] * p["k"])
    m, n, k = e["m"], e["n"], e["k"]
    a = torch.randn((m, k), device=device).half()
    b = torch.randn((k, n), device=device).half()
    bt = b.t().contiguous()
    c = torch.empty((m, n), dtype=torch.float16, device=device)
    op = register_op("rlk_bench::hgemm", lambda: lib)
    entry = lib._entry(e["kernel"])
    rows = [("registered op (torch.library)", lambda: op(a, b, None, e["accumulator"])),
            ("library call (KernelLibrary.hgemm)", lambda: lib.hgemm(a, b, accumulator=e["accumulator"])),
            ("library call, B^T given (patch_linear's)", lambda: lib.hgemm(a, b, bt, e["accumulator"])),
            ("bare kernel entry (ctypes, buffers ready)", lambda: entry(a, b, bt.view(k, n), c))]
    print(f"\ndispatch on {m}x{n}x{k} ({e['accumulator']}):")
    print("| call | median ms | torch.matmul ms (interleaved) |")
    print("|---|---|---|")
    for label, fn in rows:
        ms, mm = time_pair(fn, lambda: torch.matmul(a, b), device, warmup, reps)
        print(f"| {label} | {ms:.4f} | {mm:.4f} |")
    # The dispatch alone: a shape the plan does not hold runs torch.matmul after the same checks.
    x = torch.randn((8, 8), device=device).half()
    y = torch.randn((8, 8), device=device).half()
    for label, fn in (("registered op, 8x8x8 not planned (checks + torch.matmul)", lambda: op(x, y, None, "fp32")),
                      ("library call, 8x8x8 not planned", lambda: lib.hgemm(x, y))):
        ms, mm = time_pair(fn, lambda: torch.matmul(x, y), device, warmup, reps)
        print(f"| {label} | {ms:.4f} | {mm:.4f} (dispatch: {1e3 * (ms - mm):.1f} us) |")


def model_table(lib: KernelLibrary, device: torch.device, warmup: int, reps: int) -> None:
    """A stack of fp16 Linear layers whose (tokens, out, in) are the plan's exact shapes: a forward
    every layer of which the op can take, against the same model stock."""
    from rl_kernels.ops.runtime import patch_linear

    exact = [e for e in lib.manifest["plan"] if e["path"] == "exact" and e["accumulator"] == "fp32"]
    chain = [e for e in exact if e["m"] == exact[0]["m"]] if exact else []
    if not chain:
        print("\nno fp32 exact shape: no model to run")
        return
    tokens = chain[0]["m"]
    layers = [torch.nn.Linear(e["k"], e["n"]) for e in chain]
    model = torch.nn.ModuleList(layers).half().to(device)
    xs = [torch.randn((tokens, e["k"]), device=device).half() for e in chain]

    def forward() -> list[torch.Tensor]:
        return [layer(x) for layer, x in zip(model, xs)]

    op = register_op("rlk_bench_model::hgemm", lambda: lib)
    with torch.no_grad():
        stock = forward()
        with patch_linear(model, lib, op) as patched:
            fast = forward()
            fast_ms, stock_ms = time_pair(forward, lambda: [torch.nn.functional.linear(x, layer.weight, layer.bias)
                                                            for layer, x in zip(model, xs)], device, warmup, reps)
    diff = max(float((f.float() - s.float()).abs().max()) for f, s in zip(fast, stock))
    print(f"\nmodel: {len(chain)} fp16 Linear layers of {tokens} tokens ({patched} patched)")
    print("| forward | median ms |")
    print("|---|---|")
    print(f"| stock | {stock_ms:.4f} |")
    print(f"| patch_linear | {fast_ms:.4f} |")
    print(f"largest output difference: {diff:.3g}; speedup {stock_ms / fast_ms:.3f}x")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", required=True, help="an exported package directory (holds manifest.json)")
    p.add_argument("--device", help="default: cuda for a cuda library, else cpu")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=100)
    args = p.parse_args()
    lib = KernelLibrary(Path(args.package), allow_other_cpu=True)
    device = torch.device(args.device or ("cuda" if lib.backend == "cuda" else "cpu"))
    print(f"library {args.package}: {len(lib.kernels)} kernels, exported {lib.manifest['created']} on "
          f"{lib.manifest['device']}; measuring on {device}")
    plan_table(lib, device, args.warmup, args.reps)
    overhead_table(lib, device, args.warmup, args.reps)
    model_table(lib, device, args.warmup, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
