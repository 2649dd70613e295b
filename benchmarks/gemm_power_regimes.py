"""Our `kernel`-mode timing against do_bench in its steady state, under protocol variants.

    python3 benchmarks/gemm_power_regimes.py        # on the GPU box, repo root; prints its table

Per shape, 3 rounds of: do_bench(warmup=25 ms, rep=100 ms), do_bench(warmup=500 ms) (the GPU at its
sustained power state), then one of our variants right after it (default; no launch-cover spin;
no spin and 200 warm-up calls; 200 warm-up calls).  Columns: median ratio [min-max] over rounds.
"""
import statistics, sys
import torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from triton.testing import do_bench
from rl_kernels.config import load_config
from rl_kernels.evaluation.problems import HgemmProblem
from rl_kernels.evaluation.worker import setup_device, timing
from rl_kernels.types import HgemmSpec

cfg = load_config("configs/h200.yaml", ["eval.build.cache_dir=/tmp/rlkc"]).eval
setup_device("cuda", cfg)
SHAPES = [(64, 64, 64), (256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
          (8192, 8192, 8192), (8192, 8192, 1024), (2048, 8192, 2048)]
VARIANTS = {"default": {}, "spin0": {"launch_cover_cycles": 0}, "spin0_w200": {"launch_cover_cycles": 0, "warmup": 200},
            "w200": {"warmup": 200}}
print("shape | db25/100 | db500/100 | " + " | ".join(VARIANTS))
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    f = lambda: torch.matmul(a, b, out=c)
    problem = HgemmProblem(HgemmSpec(m, n, k, "fp32"), "cuda", cfg)
    cols = {v: [] for v in VARIANTS}
    refs, refs_short = [], []
    for r in range(3):
        for v, over in VARIANTS.items():
            refs_short.append(do_bench(f, warmup=25, rep=100, return_mode="median"))
            ref = do_bench(f, warmup=500, rep=100, return_mode="median")
            refs.append(ref)
            ccfg = cfg.model_copy(update={"timing": cfg.timing.model_copy(update=over)})
            res = timing(problem, ccfg, "cuda", r, "torch_matmul", candidate=False)
            cols[v].append(statistics.median(res["samples_ms"]["torch_matmul"]) / ref)
    print(f"{m}_{n}_{k} | {statistics.median(refs_short)*1e3:.1f}us | {statistics.median(refs)*1e3:.1f}us | "
          + " | ".join(f"{statistics.median(x):.3f} [{min(x):.3f}-{max(x):.3f}]" for x in cols.values()), flush=True)
    del a, b, c, problem
    torch.cuda.empty_cache()
