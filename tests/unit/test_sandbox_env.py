"""The worker's environment keeps glibc from returning freed memory, so a call that allocates and
frees large temporaries reuses them instead of page-faulting fresh ones on every call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rl_kernels.evaluation import sandbox

# 64 MiB allocated, touched and freed 5 times (above glibc's largest dynamic mmap threshold, 32 MiB):
# prints the page faults of the last 4 rounds.
_ROUNDS = """
import ctypes, resource
libc = ctypes.CDLL("libc.so.6"); libc.malloc.restype = ctypes.c_void_p
def round_():
    p = libc.malloc(64 << 20); ctypes.memset(p, 1, 64 << 20); libc.free(ctypes.c_void_p(p))
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4): round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.parametrize("keep", [True, False])
def test_freed_memory_is_reused_only_when_kept(tmp_path: Path, keep: bool) -> None:
    env = sandbox.environment(tmp_path, None, keep_freed_memory=keep)
    out = subprocess.run([sys.executable, "-c", _ROUNDS], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=True)
    faults = int(out.stdout)
    pages = 4 * (64 << 20) // 4096
    if keep:
        assert faults < pages // 100, faults          # the same heap memory every round
    else:
        assert faults > pages // 2, faults            # fresh pages every round (mmap, munmap)
