"""Device probe: the kernel names the torch profiler reports for a CUTLASS kernel vs the build's."""
import sys, tempfile
from pathlib import Path
import torch
from rl_kernels.config import load_config
from rl_kernels.evaluation.build import build_candidate
from rl_kernels.evaluation.artifact import load_hgemm_entry, unpack_artifact
from rl_kernels.tasks import get_task
from torch.profiler import ProfilerActivity, profile
cfg = load_config("configs/h200.yaml", ["eval.build.cache_dir=/tmp/rlkc-probe"]).eval
task = get_task("hgemm/fp32/1024_1024_1024")
b = build_candidate(task, Path("tests/candidates/hgemm/cutlass_device_api.cu").read_text(), "cuda", cfg.build)
print("build", b.ok, [len(k) for k in b.kernels], flush=True)
so = unpack_artifact(b.artifact, b.artifact_name, Path(tempfile.mkdtemp()))
f = load_hgemm_entry(so)
a = torch.randn(1024, 1024, device="cuda").half(); bb = torch.randn(1024, 1024, device="cuda").half()
c = torch.empty(1024, 1024, device="cuda").half()
f(a, bb, bb.t().contiguous().t(), c); torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    f(a, bb, bb.t().contiguous().t(), c); torch.cuda.synchronize()
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        n = e.name
        print("event", len(n), n[:50], "...", n[-50:], "prefix-of-own:", any(k.startswith(n) for k in b.kernels), "equal:", n in b.kernels)
for e in prof.profiler.kineto_results.events():
    print("raw", e.device_type(), len(e.name()), e.name()[-40:])
