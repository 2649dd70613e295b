import sys, time
from rl_kernels.evaluation.build import build_candidate
from rl_kernels.config import BuildConfig
from rl_kernels.tasks import get_task
cfg=BuildConfig(cache_dir=sys.argv[1])
task=sys.argv[2]; src=open(sys.argv[3]).read() if len(sys.argv)>3 and sys.argv[3] else get_task(task).seeds['cuda']
for i in range(int(sys.argv[4]) if len(sys.argv)>4 else 1):
    t=time.time()
    b=build_candidate(get_task(task), src.replace('r"""', f'r"""\n// variant {i} {time.time()}\n', 1), 'cuda', cfg, False)
    print(task, i, b.path, b.ok, b.reason, round(time.time()-t,1), flush=True)
    if "cannot be linked" not in b.log: print(b.log[:2500])
