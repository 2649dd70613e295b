"""Device-side: run what is left of the reproducibility table, then the throughput run.
Keeps state in /tmp/repro (lives while the machine is warm); copies results to $OUT."""
import json, os, subprocess, sys, time, glob, shutil
from pathlib import Path
budget = float(sys.argv[1]); t0 = time.monotonic()
OUT = Path(os.environ.get("OUT", "/tmp/out")); OUT.mkdir(parents=True, exist_ok=True)
state = Path("/tmp/repro"); state.mkdir(exist_ok=True)
EAGER = ["scale_bias_relu", "swiglu", "sum_dim", "max_dim", "rmsnorm", "mse_loss", "matmul",
         "gemm_bias_relu", "linear_gelu_scale", "bmm", "conv1d", "conv2d"]
PLAN = {"compile": ["builtin/conv2d"], "eager": [f"builtin/{t}" for t in EAGER]}
def done():
    got = set()
    for f in glob.glob(str(state / "*.json")):
        try:
            for r in json.load(open(f)):
                got.add((r["task"], r["baseline"]))
        except Exception:
            pass
    return got
log = open(OUT / "rest.log", "a")
for baseline, tasks in PLAN.items():
    left = [t for t in tasks if (t, baseline) not in done()]
    if not left:
        continue
    remaining = budget - (time.monotonic() - t0) - 15
    if remaining < 60:
        break
    n = len(glob.glob(str(state / "*.json")))
    out = state / f"repro-{baseline}-{n}.json"
    cmd = [sys.executable, "benchmarks/reproducibility.py", "--config", "configs/h200.yaml", "--backend", "cuda",
           "--repeats", os.environ.get("REPEATS", "10"), "--baselines", baseline, "--tasks", ",".join(left),
           "--out", str(out), "eval.launches.enabled=false", "eval.build.cache_dir=/tmp/rlkc"] + os.environ.get("EXTRA", "").split()
    print("RUN", baseline, len(left), "tasks, budget", int(remaining), flush=True, file=log)
    try:
        subprocess.run(cmd, stdout=open(OUT / f"repro-{baseline}-{n}.log", "w"), stderr=subprocess.STDOUT,
                       timeout=remaining)
    except subprocess.TimeoutExpired:
        print("cut", baseline, flush=True, file=log)
    if time.monotonic() - t0 > budget - 75:
        break
for f in glob.glob(str(state / "*.json")):
    shutil.copy(f, OUT)
print("DONE pairs", len(done()), "of", sum(map(len, PLAN.values())), file=log, flush=True)
log.close()
print(open(OUT / "rest.log").read())
