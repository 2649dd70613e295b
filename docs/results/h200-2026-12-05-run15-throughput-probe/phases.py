import sys, time, json
sys.path.insert(0, ".")
from rl_kernels.config import load_config
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.tasks import get_task
cfg = load_config("configs/h200.yaml", ["eval.build.cache_dir=/tmp/rlkc"]).eval
for tid, n in [(a.split(":")[0], int(a.split(":")[1])) for a in sys.argv[1:]]:
    task = get_task(tid); ev = Evaluator(cfg); src = task.seeds["cuda"]
    b = ev.build(task, src); ev.best_baseline(task)
    for i in range(n):
        t = time.monotonic(); m = ev.evaluate(task, src, b)
        ph = {k: round(v, 2) for k, v in m.extra.get("phase_s", {}).items()}
        print(tid, i, f"{time.monotonic()-t:.2f}s", m.rejected or "ok", m.baseline, m.extra.get("workers"),
              "prestart", m.extra.get("prestart_s"), "host_wait", m.extra.get("host_wait_s"), ph, flush=True)
    ev.close()
