import time, sys
from pathlib import Path
from rl_kernels.config import BuildConfig
from rl_kernels.evaluation import build as B
cfg = BuildConfig(cache_dir="/tmp/capt-cache")
src = Path('tests/candidates/honest/relu_cpu.py').read_text()
for i in range(4):
    t0 = time.monotonic(); cap = B._run_capture(src + f"\n# {i} {time.time()}\n", cfg)
    print(i, round(time.monotonic() - t0, 2), cap.calls is not None, (cap.error or "")[:300], flush=True)
