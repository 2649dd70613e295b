"""Evidence from the built artifact: what its shared objects import from other libraries.

The static gate reads spelling, and spelling can be hidden (`namespace q = at;`, a hand-written
`extern "C" void sgemm_(...)`, a macro).  The linker cannot be fooled that way: a call into BLAS,
cuBLAS, cuDNN or an ATen compute op ends up as an undefined symbol of the candidate's object file
(or a DT_NEEDED library of the `.so`), under its real name.  So after every successful build the
imports are read with binutils and a candidate that imports library compute is refused `no_custom_kernel`, one
that imports process, thread, signal or dynamic-loading calls with the matching reason.
(What a candidate could reach only through pointers handed out at run time is the run sandbox's
and the dispatch audit's job.)
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rl_kernels.evaluation.reasons import Reason

_LIBRARY_NEEDED = re.compile(r"lib(?:cublas|cublasLt|cudnn\w*|mkl\w*|openblas\w*|blas|lapack\w*|cufft\w*|"
                             r"cusparse\w*|cusolver\w*|dnnl|mkldnn|torch_cuda_linalg)\b")
# Undefined symbols, by the reason an import of them is refused with.
_IMPORTS: tuple[tuple[Reason, re.Pattern[str]], ...] = (
    (Reason.NO_CUSTOM_KERNEL, re.compile(
        r"(?:cblas_\w+|[sdczh](?:gemm|gemv|gemm3m|symm|hemm|syrk|herk|syr2k|trmm|trsm|ger[cu]?|axpy|dot[cu]?)_?"
        r"|(?:cublas|cudnn|cufft|cusparse|cusolver|mkl_|openblas_|dnnl_|MKL_)\w*)")),
    (Reason.NO_CUSTOM_KERNEL, re.compile(r"_ZN2at6native\w*|_ZN2at4cuda4blas\w*|_ZN3c1010Dispatcher\w*")),
    (Reason.PROCESS_SPAWN, re.compile(
        r"(?:v?fork|system|popen|exec[lv]p?e?|execvpe|posix_spawnp?|syscall|ptrace|clone|dlopen|dlmopen|dlsym|dlvsym"
        r"|prctl|unshare|setns|kill)")),
    (Reason.NETWORK_ACCESS, re.compile(r"(?:socket|connect|getaddrinfo|gethostbyname)")),
    (Reason.THREAD_SPAWN, re.compile(r"pthread_create|thrd_create|_ZNSt6thread\w*_M_start_thread\w*")),
    (Reason.MONKEYPATCH, re.compile(r"_ZN2at(?:15set_num_threads|23set_num_interop_threads)\w*")),
    (Reason.SANDBOX_VIOLATION, re.compile(r"(?:sigaction|signal|__sysv_signal|bsd_signal|sigset|userfaultfd"
                                          r"|mprotect|pkey_mprotect)")),
)
_ATEN_OP = re.compile(r"_ZN2at4_ops(\d+)(\w+)")
# ATen operators native code may call: allocation, views, dtype/layout plumbing (no arithmetic).
ALLOCATION_OPS: frozenset[str] = frozenset(
    "empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like "
    "full full_like fill_ zero_ view _unsafe_view reshape _reshape_alias as_strided contiguous detach alias "
    "t transpose permute expand squeeze unsqueeze select slice narrow resize_ to _to_copy copy_ clone "
    "_local_scalar_dense item is_nonzero lift_fresh _has_compatible_shallow_copy_type".split()
)


@dataclass(frozen=True)
class Imports:
    needed: list[str]    # DT_NEEDED libraries of the linked artifact
    symbols: list[str]   # undefined symbols of the candidate's own object files


def _run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(f"cannot read imports with {cmd[0]}: {res.stderr.strip()[:300]}")
    return res.stdout


def read_imports(objects: list[Path], libraries: list[Path]) -> Imports:
    """What the candidate's objects reference and what the linked libraries need.

    Objects, not the final `.so`: a CUDA artifact links the static CUDA runtime, whose own imports
    (dlopen, sockets, threads) say nothing about the candidate.
    """
    needed = [lib for path in libraries
              for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", _run(["readelf", "-d", "-W", str(path)]))]
    symbols = [line.split()[-1].split("@")[0] for path in objects
               for line in _run(["nm", "--undefined-only", str(path)]).splitlines() if line.strip()]
    return Imports(needed, symbols)


def aten_op(symbol: str) -> str | None:
    """`_ZN2at4_ops2mm4call...` -> "mm": the ATen operator a mangled at::_ops symbol belongs to."""
    m = _ATEN_OP.match(symbol)
    if m is None:
        return None
    length = int(m.group(1))
    return m.group(2)[:length]


def _allocation_op(op: str) -> bool:
    """at::_ops structs are named <operator>[_<overload>]: `empty_memory_format` is `empty`."""
    return any(op == a or op.startswith(a.rstrip("_") + "_") for a in ALLOCATION_OPS)


# nvcc makes a translation unit that defines or instantiates a kernel register it at load time;
# one without a kernel of its own never references this.
KERNEL_REGISTRATION = "__cudaRegisterFunction"


def refused_import(imports: Imports, allow_library: bool, require_kernel: bool = False) -> tuple[Reason, str] | None:
    """The first import that betrays library compute (unless allowed) or an escape, else None.

    With `require_kernel` (cuda candidates), objects that register no kernel of their own are
    refused too: the work would have to run in something the candidate did not compile.
    """
    if require_kernel and not allow_library and KERNEL_REGISTRATION not in imports.symbols:
        return Reason.NO_CUSTOM_KERNEL, "registers no CUDA kernel of its own (no __global__ function is compiled here)"
    if not allow_library:
        for lib in imports.needed:
            if _LIBRARY_NEEDED.match(lib):
                return Reason.NO_CUSTOM_KERNEL, f"links {lib}: a library does the work"
    for symbol in imports.symbols:
        op = aten_op(symbol)
        if op is not None:
            if not allow_library and not _allocation_op(op):
                return Reason.NO_CUSTOM_KERNEL, f"imports the ATen operator {op} ({symbol[:80]})"
            continue
        for reason, pattern in _IMPORTS:
            if pattern.fullmatch(symbol) and not (allow_library and reason is Reason.NO_CUSTOM_KERNEL):
                return reason, f"imports {symbol[:100]}"
    return None


def check_artifact(objects: list[Path], libraries: list[Path], allow_library: bool,
                   require_kernel: bool = False) -> tuple[Reason, str] | None:
    """Evidence check over one build: the candidate's objects and the libraries linked from them."""
    found = refused_import(read_imports(objects, libraries), allow_library, require_kernel)
    if found is None:
        return None
    return found[0], f"{', '.join(p.name for p in objects)}: {found[1]}"
