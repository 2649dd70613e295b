"""Runtime evidence: which device kernels one candidate call launched, and whether they are its own.

The static gate reads spelling and the build's evidence (evidence.py) reads what the objects
import; neither sees what actually runs.  A candidate can compile a kernel it never launches and
do the work elsewhere (on the host between copies, or in code reached only at run time).  So one
call is run under the torch profiler (CUPTI activity records: every kernel the device executed,
by name and duration) and its kernels are compared with the kernels the candidate's own objects
register (`registered_kernels`, read from nvcc's launch stubs at build time): a call that runs no
kernel of its own, or spends most of its device time in kernels it did not compile (ATen,
cuBLAS, anything loaded at run time), is refused `no_custom_kernel`.  CUTLASS and CuTe templates
instantiated in the candidate's translation unit are its own kernels: their stubs are in its
object.  The profiled call runs after correctness and before timing (a refused candidate costs no
timed calls); the profiler is stopped before the first timed window.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.reasons import Reason, Rejected

# nvcc defines one host launch stub per kernel the translation unit defines or instantiates, named
# `__device_stub__` + the kernel's mangled name without its leading underscore.  Optimised builds
# may inline the stub itself; its static locals (`_ZZ...E3__f`, the guard `_ZGVZ...`) stay.
_STUB = re.compile(r"_Z(?:GVZ|Z)?L?(\d+)(__device_stub__)")
_SIMPLE_MANGLED = re.compile(r"_Z(\d+)")
# Device activities that are copies or fills issued by the runtime, not kernels.
_NOT_A_KERNEL = ("Memcpy", "Memset")


@dataclass(frozen=True)
class Launch:
    name: str          # kernel name as the profiler reports it (demangled)
    device_us: float   # its device time in the profiled call


def registered_kernels(objects: list[Path]) -> list[str]:
    """Mangled names of the kernels the candidate's objects register (from nvcc's launch stubs).

    An `extern "C"` kernel's stub carries the C++ mangling of its signature while the device knows
    it by its plain name; both are listed.
    """
    names: set[str] = set()
    for path in objects:
        res = subprocess.run(["nm", "--defined-only", str(path)], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise RuntimeError(f"cannot read the symbols of {path.name}: {res.stderr.strip()[:300]}")
        for line in res.stdout.splitlines():
            symbol = line.split()[-1] if line.strip() else ""
            m = _STUB.match(symbol)
            if m is None:
                continue
            ident = symbol[m.start(2): m.start(2) + int(m.group(1))]
            mangled = "_" + ident[len("__device_stub__"):]
            names.add(mangled)
            simple = _SIMPLE_MANGLED.match(mangled)
            if simple and mangled[simple.end():][:1].isalpha():
                names.add(mangled[simple.end(): simple.end() + int(simple.group(1))])
    return sorted(names)


def _key(name: str) -> str:
    return "".join(name.split())


def own_kernel_keys(mangled: list[str], demangle: Callable[[str], str]) -> frozenset[str]:
    """The names under which the profiler may report the candidate's kernels: mangled and demangled
    (with the runtime's own demangler, the one the profiler uses), whitespace removed."""
    return frozenset(_key(n) for m in mangled for n in (m, demangle(m)))


def launch_evidence_wanted(allow_torch_ops: bool, cfg: EvalConfig, device: str) -> bool:
    """Whether the profiled call runs: cuda only, and not where the task lets torch do the work."""
    return device == "cuda" and cfg.launches.enabled and not (allow_torch_ops or cfg.allow_torch_rewrites)


def dispatch_audit_wanted(kind: str, allow_torch_ops: bool, cfg: EvalConfig) -> bool:
    """Whether a module candidate's call is audited for ATen compute under a dispatch mode (the other
    run-time check that torch did not do the work), likewise not where the task lets it."""
    return kind == "module" and not (allow_torch_ops or cfg.allow_torch_rewrites)


def record_launches(call: Callable[[], Any], sync: Callable[[], None]) -> list[Launch]:
    """Runs `call()` once under the torch profiler and returns the kernels the device executed."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        sync()
    cuda = torch.autograd.DeviceType.CUDA
    return [Launch(e.name, float(e.time_range.elapsed_us())) for e in prof.events()
            if e.device_type == cuda and not e.name.startswith(_NOT_A_KERNEL)]


def judge_launches(launches: list[Launch], own: frozenset[str], max_foreign_share: float) -> dict[str, Any]:
    """The verdict on one profiled call: figures for the Measurement, or `no_custom_kernel` raised."""
    mine = [x for x in launches if _key(x.name) in own]
    foreign = [x for x in launches if _key(x.name) not in own]
    total = sum(x.device_us for x in launches)
    share = sum(x.device_us for x in foreign) / total if total > 0 else (1.0 if foreign else 0.0)
    names = sorted({x.name for x in foreign}, key=len)
    figures = {"own_kernels": len(mine), "foreign_kernels": len(foreign), "foreign_share": share,
               "foreign_names": [n[:160] for n in names[:5]]}
    if not mine:
        ran = f"it launched {len(foreign)} kernel(s) it did not compile: {'; '.join(figures['foreign_names']) or '-'}"
        raise Rejected(Reason.NO_CUSTOM_KERNEL, f"no kernel of the candidate's own ran in a profiled call ({ran})")
    if share > max_foreign_share:
        raise Rejected(Reason.NO_CUSTOM_KERNEL,
                       f"{share:.0%} of a profiled call's device time ran in kernels the candidate did not "
                       f"compile (limit {max_foreign_share:.0%}): {'; '.join(figures['foreign_names'])}")
    return figures
