"""CUDA-L1's released load_inline kernels: do their CUDA files compile against the slim headers, and
where they do not, does the build go back to torch's headers (TOO_SLIM) or wrongly stop?"""
import json, subprocess, sys, time, re
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from torch.utils import cpp_extension
from rl_kernels.config import BuildConfig
from rl_kernels.evaluation import build as B, slim_torch
cfg = BuildConfig(cache_dir="/tmp/cl1/cache")
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("custom_code") and "cuda_sources" in r["custom_code"]]
limit = int(sys.argv[2]) if len(sys.argv) > 2 else len(rows)
if len(sys.argv) > 4:
    only = set(sys.argv[4].split(","))
    rows = [r for r in rows if f"L{r['level_id']}_{r['task_id']}" in only]
out = Path("/tmp/cl1/work"); out.mkdir(exist_ok=True)
roots = list(cpp_extension.include_paths("cpu"))

def nvcc(d, call, slim):
    cmd = [cfg.nvcc, *(["-Islim"] if slim else []), "-I/tmp/stubinc", "-I/tmp/nvw/inc", *B._torch_flags(call["name"]), *B._torch_includes(True, cfg),
           *[f"-I{p}" for p in call["extra_include_paths"]], *B._module_nvcc_flags(call, cfg), "-c", "cuda.cu", "-o", "cuda.o"]
    t = time.monotonic()
    r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=900)
    return r.returncode == 0, time.monotonic() - t, r.stdout + r.stderr

def one(r):
    tag = f"L{r['level_id']}_{r['task_id']}"
    cap = B._capture(r["custom_code"], cfg)
    if cap.calls is None:
        return {"task": tag, "capture": (cap.reason, cap.error[-300:])}
    res = {"task": tag, "calls": []}
    for call in cap.calls:
        if not call["cuda_sources"]:
            continue
        d = out / f"{tag}_{call['name']}"; d.mkdir(exist_ok=True)
        for k, v in B._generated_files(call).items():
            (d / k).write_text(v)
        if not slim_torch.suits(call["cuda_sources"]):
            res["calls"].append({"name": call["name"], "needs_python": True})
            continue
        slim_torch.write_headers(d / "slim", call["cuda_sources"], roots)
        ok, s, log = nvcc(d, call, True)
        entry = {"name": call["name"], "slim_ok": ok, "slim_s": round(s, 1)}
        if not ok:
            entry["too_slim"] = bool(slim_torch.TOO_SLIM.search(log))
            entry["first_error"] = next((l for l in log.splitlines() if "error" in l), log[-300:])[:300]
            fok, fs, flog = nvcc(d, call, False)
            entry.update(full_ok=fok, full_s=round(fs, 1))
            if not fok:
                entry["full_first_error"] = next((l for l in flog.splitlines() if "error" in l), flog[-300:])[:300]
        res["calls"].append(entry)
    return res

with ThreadPoolExecutor(int(sys.argv[3]) if len(sys.argv) > 3 else 2) as pool:
    for res in pool.map(one, rows[:limit]):
        print(json.dumps(res), flush=True)
