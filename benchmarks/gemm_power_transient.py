"""Why an 8192^3 GEMM has no single time on a power-limited H200 (docs/EVALUATOR.md, fidelity).

    python3 benchmarks/gemm_power_transient.py      # on the GPU box, repo root; prints its table

Per shape (8192^3, 4096^3): the per-call time over 3 s of back-to-back calls after 2 s idle (median
per time window: the clock falls once the board reaches its power limit), triton's do_bench under
a short and a long window, and our `kernel`-mode protocol under several warm-ups, each right after
a do_bench, with the SM clock (NVML) after each.
"""
import statistics, sys, time
import torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from triton.testing import do_bench
from rl_kernels.config import load_config
from rl_kernels.evaluation.problems import HgemmProblem
from rl_kernels.evaluation.worker import setup_device, timing
from rl_kernels.types import HgemmSpec

def clk():
    try:
        return torch.cuda.clock_rate()
    except Exception as e:
        return str(e)[:40]

cfg = load_config("configs/h200.yaml", ["eval.build.cache_dir=/tmp/rlkc"]).eval
setup_device("cuda", cfg)
for shape in [(8192, 8192, 8192), (4096, 4096, 4096)]:
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    f = lambda: torch.matmul(a, b, out=c)
    # idle 2 s, then back-to-back calls with events, 3 s
    torch.cuda.synchronize(); time.sleep(2.0)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(4000)]
    calls = int(3000 / (2 * m * n * k / 700e12 * 1e3))
    calls = min(calls, len(ev))
    for i in range(calls):
        ev[i][0].record(); f(); ev[i][1].record()
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in ev[:calls]]
    t = 0.0; marks = []
    for i, x in enumerate(ms):
        t += x
        marks.append((t, x))
    def window(t0, t1):
        xs = [x for tt, x in marks if t0 <= tt < t1]
        return statistics.median(xs) if xs else float("nan")
    print(f"== {shape} back-to-back after 2 s idle: {calls} calls, clock after {clk()}")
    print("   median ms by window (ms since start): " + ", ".join(
        f"{t0}-{t1}: {window(t0, t1):.4f}" for t0, t1 in [(0, 10), (10, 25), (25, 50), (50, 100), (100, 200), (200, 500), (500, 1000), (1000, 2000), (2000, 3000)]))
    for label, kw in [("do_bench 25/100", dict(warmup=25, rep=100)), ("do_bench 25/100 again", dict(warmup=25, rep=100)),
                      ("do_bench 500/1000", dict(warmup=500, rep=1000))]:
        torch.cuda.synchronize(); time.sleep(1.0)
        r = do_bench(f, return_mode="median", **kw)
        print(f"   {label:24s} {r:.4f} ms  clock {clk()}")
    problem = HgemmProblem(HgemmSpec(m, n, k, "fp32"), "cuda", cfg)
    for label, over in [("ours warmup 5", {}), ("ours warmup 5 again", {}), ("ours warmup 200", {"warmup": 200}),
                        ("ours warmup 200 samples 200", {"warmup": 200, "samples": 200})]:
        ccfg = cfg.model_copy(update={"timing": cfg.timing.model_copy(update=over)})
        torch.cuda.synchronize(); time.sleep(1.0)
        # do_bench right before, as in the benchmark's rounds
        ref = do_bench(f, warmup=25, rep=100, return_mode="median")
        res = timing(problem, ccfg, "cuda", 0, "torch_matmul", candidate=False)
        ours = statistics.median(res["samples_ms"]["torch_matmul"])
        print(f"   {label:28s} ours {ours:.4f} ms  do_bench before {ref:.4f}  ratio {ours / ref:.3f}  pool {res['pool_sets']} clock {res['sm_clock_mhz']}")
    del a, b, c, problem
    torch.cuda.empty_cache()
