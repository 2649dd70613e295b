import json, sys, collections
from rl_kernels.evaluation.guards import static_check
from rl_kernels.types import Task
rows = [json.loads(l) for l in open('/tmp/h100.json') if l.strip()]
rows = [r for r in rows if r.get("custom_code") and "cuda_sources" in r["custom_code"]]
task = Task(id="x", kind="module", allow_torch_ops=True)
c = collections.Counter(); det = collections.defaultdict(list)
for r in rows:
    tag = f"L{r['level_id']}_{r['task_id']}"
    f = static_check(task, r["custom_code"], "cuda")
    key = f.reason if f is not None and not isinstance(f, list) else (f[0].reason if f else None)
    c[str(key)] += 1
    if key is not None: det[str(key)].append((tag, str(f)[:160]))
print(len(rows), c)
for k, v in det.items():
    if any(a in k for a in sys.argv[1:]):
        for t in v: print(k, t)
