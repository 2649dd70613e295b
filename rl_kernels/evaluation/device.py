"""Which device a measurement runs on, and an exclusive lock so two processes never time on one.

The parent never initialises CUDA (that would hold a context on the timed GPU); it asks nvidia-smi.
The lock is a file lock keyed by the GPU UUID (or, on the cpu backend, by the pinned core set).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from rl_kernels.config import EvalConfig


@dataclass(frozen=True)
class DeviceIdentity:
    name: str
    key: str   # stable id used for locks and baseline caches
    capability: tuple[int, int] | None = None   # CUDA compute capability, when nvidia-smi reports it


def _visible_gpu_index() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


def identify(cfg: EvalConfig) -> DeviceIdentity:
    if cfg.backend == "cuda":
        smi = shutil.which("nvidia-smi")
        if smi:
            out = subprocess.run([smi, "--query-gpu=name,uuid,compute_cap", "--format=csv,noheader", "-i",
                                  _visible_gpu_index()], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                name, uuid, cap = (x.strip() for x in out.stdout.strip().splitlines()[0].rsplit(",", 2))
                major, _, minor = cap.partition(".")
                capability = (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
                return DeviceIdentity(name, uuid, capability)
        return DeviceIdentity("cuda", f"cuda-{_visible_gpu_index()}")
    cores = cfg.timing.cpu_cores or sorted(os.sched_getaffinity(0))
    cpu = platform.processor() or platform.machine()
    core_key = "-".join(str(c) for c in cores)
    return DeviceIdentity(f"cpu ({cpu}, cores {core_key})", f"cpu-{platform.node()}-{core_key}")


def device_lock(ident: DeviceIdentity, cfg: EvalConfig) -> FileLock:
    digest = hashlib.sha256(ident.key.encode()).hexdigest()[:16]
    path = Path(cfg.build.cache_dir) / "locks" / f"device-{digest}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))
