import time, sys, subprocess
def t(code):
    r = subprocess.run([sys.executable, "-c", "import time;t=time.perf_counter();" + code + ";print(round(time.perf_counter()-t,2))"], capture_output=True, text=True)
    return (r.stdout.strip().splitlines() or ["?"])[-1] + (r.stderr.strip()[-200:] if r.returncode else "")
print("import torch", t("import torch"))
for mod in ["torch._dynamo", "torch._inductor", "torch._inductor.compile_fx", "torch.utils._python_dispatch"]:
    print(mod, "after torch:", t(f"import torch;t=time.perf_counter();import {mod}"))
print("cuda init + first alloc", t("import torch;t=time.perf_counter();torch.cuda.init();torch.empty(1,device='cuda')"))
print("dispatch mode first call", t("import torch;x=torch.randn(8,device='cuda');from torch.utils._python_dispatch import TorchDispatchMode\nclass R(TorchDispatchMode):\n  def __torch_dispatch__(s,f,ty,a=(),k=None): return f(*a,**(k or {}))\nt=time.perf_counter()\nwith R(): torch.softmax(x,-1)"))
print("cupti profiler first use", t("import torch;x=torch.randn(8,device='cuda');torch.cuda.synchronize();t=time.perf_counter()\nwith torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p: torch.softmax(x,-1);torch.cuda.synchronize()"))
