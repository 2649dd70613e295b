"""Where a module evaluation's in-worker seconds go on the GPU (one process, trusted code only)."""
import sys, time
t0 = time.perf_counter()
import torch
T = {"import torch": time.perf_counter() - t0}
sys.path.insert(0, ".")
from rl_kernels.config import load_config
from rl_kernels.tasks import get_task
from rl_kernels.evaluation import worker as W
from rl_kernels.evaluation.inputs import DISTRIBUTIONS, resample_inputs, to_device

def clock(name, fn):
    torch.cuda.synchronize() if torch.cuda.is_initialized() else None
    t = time.perf_counter(); r = fn()
    torch.cuda.synchronize() if torch.cuda.is_initialized() else None
    T[name] = T.get(name, 0.0) + time.perf_counter() - t
    return r

cfg = load_config("configs/h200.yaml", []).eval
for tid in sys.argv[1:]:
    T.clear() if tid != sys.argv[1] else None
    task = get_task(tid)
    dev = clock("setup_device (cuda init)", lambda: W.setup_device("cuda", cfg))
    prob = clock("make_problem (model, ref64, compile wrapper)", lambda: W.make_problem(task, dev, cfg, 7, ["eager", "compile"], None))
    warm = clock("make_set normal (cpu fp64 -> gpu)", lambda: prob.make_set("normal", 7))
    clock("first compile call (kept graph)", lambda: prob.call_baseline("compile", warm))
    for i, d in enumerate(DISTRIBUTIONS * 2):
        cpu_template = [x.cpu() if isinstance(x, torch.Tensor) else x for x in prob.template]
        clock("old make_set x8 (host fp64, copy)", lambda: to_device(resample_inputs(cpu_template, d, 100 + i), "cuda"))
        s = clock(f"make_set x8 (on the device)", lambda: prob.make_set(d, 100 + i))
        clock("reference fp64 x8", lambda: prob.reference(s))
        clock("expected (eager) x8", lambda: prob.expected(s))
        clock("check_outputs x8", lambda: W.check_outputs(prob, s, prob.expected(s)))
    clock("variant_sets", lambda: prob.variant_sets(9))
    print(f"== {tid} set_bytes={prob.set_bytes}")
    for k, v in T.items():
        print(f"  {k:48s} {v:7.3f} s")
