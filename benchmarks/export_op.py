"""The exported op against torch.matmul: per planned shape, what dispatch costs, and a model end to end.

    python benchmarks/export_op.py --package OUT/rlk_hgemm_cuda [--device cuda] [--reps 100]

Prints:
  1. per plan entry: the op's median ms (through `KernelLibrary.hgemm`, padding included) beside
     torch.matmul's, measured now, interleaved, and the decision export recorded; on a GPU also in
     `server` mode (each call after an idle gap, `--gap-ms`, as CUDA-L2's server mode: caches and
     clocks as a serving process finds them);
  2. dispatch overhead on the smallest exact shape: the registered op (torch.library, Python), the
     library call without the op, the bare kernel entry (ctypes) on prepared buffers, torch.matmul;
  3. a stack of fp16 Linear layers of the planned sizes, stock vs `patch_linear`;
  4. (GPU) CUDA graphs: per exact shape, one op call captured and replayed against a captured
     torch.matmul, the path the op took inside the capture, and the replay's largest difference;
  5. (GPU, with transformers) a small Llama whose every Linear is an exact square shape of the plan:
     forward stock vs `patch_linear`, eager and replayed from a CUDA graph, outputs compared.
Medians of interleaved calls (`rl_kernels.ops.export.time_pair`: CUDA events on a GPU, the wall
clock on a CPU); beside them, on a GPU, triton's do_bench of the same two calls when triton is there.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import statistics
import time
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


def time_pair_server(f, g, reps: int, gap_ms: float) -> tuple[float, float]:
    """Median ms of f and g, interleaved, each call alone on an idle GPU after `gap_ms` of host sleep."""
    fs, gs = [], []
    for _ in range(reps):
        for fn, out in ((f, fs), (g, gs)):
            torch.cuda.synchronize()
            time.sleep(gap_ms / 1e3)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
    return statistics.median(fs), statistics.median(gs)


def plan_table(lib: KernelLibrary, device: torch.device, warmup: int, reps: int, gap_ms: float) -> None:
    server = device.type == "cuda"
    print("| M | N | K | acc | path at export | speedup at export | op ms | torch.matmul ms | speedup now | "
          "do_bench op / matmul ms |" + (" server op / matmul ms | server speedup |" if server else ""))
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if server else ""))
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
        row = (f"| {e['m']} | {e['n']} | {e['k']} | {e['accumulator']} | {e['path']} | {e.get('speedup') or '-'} | "
               f"{op_ms:.4f} | {mm_ms:.4f} | {mm_ms / op_ms:.3f} | {dbs} |")
        if server:
            s_op, s_mm = time_pair_server(lambda: lib.hgemm(a, b, accumulator=e["accumulator"]),
                                          lambda: torch.matmul(a, b), max(5, reps // 4), gap_ms)
            row += f" {s_op:.4f} / {s_mm:.4f} | {s_mm / s_op:.3f} |"
        print(row)
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
    native = lib.native_op()
    rows = [("C++ dispatch op (<package>_cpp::hgemm)", lambda: native(a, b, None, e["accumulator"]))] if native else []
    rows += [("registered op (torch.library)", lambda: op(a, b, None, e["accumulator"])),
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
    unplanned = [("C++ dispatch op, 8x8x8 not planned", lambda: native(x, y, None, "fp32"))] if native else []
    unplanned += [("registered op, 8x8x8 not planned (checks + torch.matmul)", lambda: op(x, y, None, "fp32")),
                  ("library call, 8x8x8 not planned", lambda: lib.hgemm(x, y))]
    if not native:
        print(f"(no C++ dispatch here: {lib.native_reason})")
    for label, fn in unplanned:
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

    op = lib.native_op() or register_op("rlk_bench_model::hgemm", lambda: lib)   # the package's op()
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


def graph_table(lib: KernelLibrary, device: torch.device, warmup: int, reps: int) -> None:
    """One op call captured per exact shape (the op's capture rule decides kernel or torch.matmul),
    replayed against a captured torch.matmul; the replay's output against eager on new inputs."""
    exact = [e for e in lib.manifest["plan"] if e["path"] == "exact"]
    print("\nCUDA graphs (one call captured, replays timed, interleaved):")
    print("| M | N | K | kernel capturable at export | path inside the capture | op graph ms | matmul graph ms | "
          "replay vs eager (relative norm) |")
    print("|---|---|---|---|---|---|---|---|")
    for e in exact:
        a = torch.randn((e["m"], e["k"]), device=device).half()
        b = torch.randn((e["k"], e["n"]), device=device).half()
        lib.hgemm(a, b, accumulator=e["accumulator"])
        torch.matmul(a, b)
        torch.cuda.synchronize()
        path = lib.choose(a, b, e["accumulator"], capturing=True).path   # what the op takes inside a capture
        kernel = lib.kernels[e["kernel"]]
        g_op, g_mm = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g_op):
                c_op = lib.hgemm(a, b, accumulator=e["accumulator"])
        except RuntimeError as exc:   # the op's capture rule let a kernel in that breaks the capture: a bug to see
            print(f"| {e['m']} | {e['n']} | {e['k']} | {kernel.get('capturable')} | {path} | capture FAILED: "
                  f"{str(exc).splitlines()[0][:150]} | - | - |")
            continue
        with torch.cuda.graph(g_mm):
            torch.matmul(a, b)
        a.copy_(torch.randn_like(a.float()).half())
        g_op.replay()
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        gap = float((c_op.float() - ref).norm() / ref.norm())
        op_ms, mm_ms = time_pair(g_op.replay, g_mm.replay, device, warmup, reps)
        print(f"| {e['m']} | {e['n']} | {e['k']} | {kernel.get('capturable')} | {path} | {op_ms:.4f} | {mm_ms:.4f} | "
              f"{gap:.2e} |")


def transformer_table(lib: KernelLibrary, device: torch.device, warmup: int, reps: int) -> None:
    """A 2-layer Llama (transformers, random weights, fp16) with hidden, intermediate and vocabulary
    size N and N tokens, for each exact N^3 fp32 kernel of the plan: every Linear is N x N x N."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rl_kernels.ops.runtime import patch_linear

    sizes = sorted({e["m"] for e in lib.manifest["plan"] if e["path"] == "exact" and e["accumulator"] == "fp32"
                    and e["m"] == e["n"] == e["k"] and 256 <= e["m"] <= 4096})
    if not sizes:
        print("\nno exact N^3 fp32 kernel with 256 <= N <= 4096: no transformer to run")
        return
    op = lib.native_op() or register_op("rlk_bench_llama::hgemm", lambda: lib)   # the package's op()
    print(f"\nsmall Llama (2 layers, random weights, fp16), N tokens, every Linear N x N x N; "
          f"{'C++' if lib.native_op() else 'Python'} dispatch:")
    print("| N | Linear layers patched | stock eager ms | patched eager ms | eager speedup | stock graph ms | "
          "patched graph ms | graph speedup | logits gap patched vs stock (relative norm) | graph vs eager (patched) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        cfg = LlamaConfig(hidden_size=n, intermediate_size=n, vocab_size=n, num_hidden_layers=2,
                          num_attention_heads=max(1, n // 128), num_key_value_heads=max(1, n // 128),
                          max_position_embeddings=n, tie_word_embeddings=False)
        torch.manual_seed(0)
        stock = LlamaForCausalLM(cfg).half().to(device).eval()
        patched_model = copy.deepcopy(stock)
        ids = torch.randint(0, n, (1, n), device=device)
        with torch.no_grad(), patch_linear(patched_model, lib, op) as patched:
            def run_stock() -> torch.Tensor:
                return stock(input_ids=ids, use_cache=False).logits

            def run_patched() -> torch.Tensor:
                return patched_model(input_ids=ids, use_cache=False).logits

            ref, out = run_stock(), run_patched()
            gap = float((out.float() - ref.float()).norm() / ref.float().norm())
            eager = time_pair(run_patched, run_stock, device, warmup, max(10, reps // 5))
            try:
                graphs = []
                for fn in (run_stock, run_patched):
                    fn()
                    torch.cuda.synchronize()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        static = fn()
                    graphs.append((g, static))
                graphs[1][0].replay()
                torch.cuda.synchronize()
                graph_gap = f"{float((graphs[1][1].float() - out.float()).norm() / out.float().norm()):.2e}"
                replay = time_pair(graphs[1][0].replay, graphs[0][0].replay, device, warmup, max(10, reps // 5))
                replayed = f"{replay[1]:.3f} | {replay[0]:.3f} | {replay[1] / replay[0]:.3f}"
            except RuntimeError as exc:   # the model's own forward may not be capturable (a host sync)
                graph_gap, replayed = "-", f"capture failed: {str(exc).splitlines()[0][:120]} | - | -"
        print(f"| {n} | {patched} | {eager[1]:.3f} | {eager[0]:.3f} | {eager[1] / eager[0]:.3f} | {replayed} | "
              f"{gap:.2e} | {graph_gap} |")
        torch.cuda.empty_cache()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", required=True, help="an exported package directory (holds manifest.json)")
    p.add_argument("--device", help="default: cuda for a cuda library, else cpu")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--gap-ms", type=float, default=2.0, help="server mode: idle host time before each call")
    args = p.parse_args()
    lib = KernelLibrary(Path(args.package), allow_other_cpu=True)
    device = torch.device(args.device or ("cuda" if lib.backend == "cuda" else "cpu"))
    print(f"library {args.package}: {len(lib.kernels)} kernels, exported {lib.manifest['created']} on "
          f"{lib.manifest['device']}; measuring on {device}")
    plan_table(lib, device, args.warmup, args.reps, args.gap_ms)
    overhead_table(lib, device, args.warmup, args.reps)
    model_table(lib, device, args.warmup, args.reps)
    if device.type == "cuda":
        graph_table(lib, device, args.warmup, args.reps)
        if importlib.util.find_spec("transformers") is not None:
            transformer_table(lib, device, args.warmup, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
