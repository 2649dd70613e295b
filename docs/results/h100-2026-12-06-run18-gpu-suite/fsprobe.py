"""Device probe: what a forked child's device count is after the server's imports, with NVML as the
imports left it and with NVML shut down first (forkserver._release_nvml)."""
import os, sys, ctypes, traceback, importlib, time
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
calls = []
def prof(frame, event, arg):
    if event == "call" and frame.f_code.co_name in ("device_count", "_raw_device_count_nvml", "_device_count_nvml", "is_available"):
        b = frame.f_back
        calls.append(f"{frame.f_code.co_name} <- {b.f_code.co_filename.split('site-packages/')[-1]}:{b.f_lineno}")
sys.setprofile(prof)
from rl_kernels.evaluation import worker, forkserver
import torch
for name in worker.imports_ahead(True, True):
    importlib.import_module(name)
print("cuda_visible", worker.cuda_visible(), flush=True)
sys.setprofile(None)
print("calls:", *calls[:8], sep="\n  ")
print("nvml loaded", "libnvidia-ml" in open("/proc/self/maps").read(), flush=True)
import inspect
src = inspect.getsource(torch.cuda.device_count)
print("device_count bypasses NVML once initialised:", "_initialized or" in src, flush=True)

def child(label):
    pid = os.fork()
    if pid == 0:
        try:
            os.closerange(3, 4096)
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
            fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(12)]   # reuse the closed numbers
            torch.cuda.init()
            print(label, "c10", torch._C._cuda_getDeviceCount(), "nvml", torch.cuda._device_count_nvml(),
                  "device_count", torch.cuda.device_count(), flush=True)
            print(label, "props", torch.cuda.get_device_properties(0).name, flush=True)
        except BaseException as e:
            print(label, "FAILED", repr(e), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)

child("inherited NVML:")
print("released", forkserver._release_nvml(), flush=True)
child("released NVML:")
