import sys, time
from rl_kernels.config import load_config
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.tasks import get_task
def run():
    cfg = load_config(None, [f"eval.build.cache_dir=/tmp/ws1/cache", *sys.argv[1:]]).eval
    print("module baselines", cfg.baselines.module, "prestart", cfg.sandbox.prestart, "fork", cfg.sandbox.fork_server)
    t = get_task("hgemm/fp32/64_64_64")
    for i in range(2):
        t0 = time.monotonic(); ev = Evaluator(cfg)
        m = ev.evaluate(t, t.seeds["cpu"])
        print(i, round(time.monotonic()-t0,1), m.correct, m.extra.get("forked"), m.extra.get("phase_s"), m.extra.get("prestart_s"), flush=True)
        ev.close()
if __name__ == "__main__":
    run()
