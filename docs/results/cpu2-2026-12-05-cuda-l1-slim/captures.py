import json, time
from rl_kernels.config import BuildConfig
from rl_kernels.evaluation import build as B
prev = {json.loads(l)["task"]: json.loads(l) for l in open("docs/results/cpu2-2026-12-05-cuda-l1-slim/after-constructor-capture.jsonl")}
rows = [json.loads(l) for l in open('/tmp/h100.json') if l.strip()]
rows = [r for r in rows if r.get("custom_code") and "cuda_sources" in r["custom_code"]]
same = diff = 0
for server in (True, False):
    cfg = BuildConfig(cache_dir=f"/tmp/cl1cap-{server}", capture_server=server)
    t0 = time.monotonic(); got = {}
    for r in rows:
        tag = f"L{r['level_id']}_{r['task_id']}"
        got[tag] = B._run_capture(r["custom_code"], cfg).calls is not None
    was = {t: "calls" in p for t, p in prev.items()}
    mism = [t for t in got if t in was and got[t] != was[t]]
    print("server", server, f"{time.monotonic()-t0:.1f} s", sum(got.values()), "of", len(got), "captured; differ from the earlier run:", mism)
