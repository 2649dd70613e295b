"""cuBLAS GemmEx and cuBLASLt (heuristic, autotuned) hgemm baselines, called from Python via ctypes.

The baselines live in a small C-ABI library (native/cublas_hgemm.cu) rather than in torch, because
torch.matmul exposes neither the accumulator (fp16-accumulate is what CUDA-L2's F16F16F16F16 tasks
are timed against) nor cuBLASLt's algorithm choice. The library is built once per toolchain through
the same content-addressed build cache as candidates and linked against whichever cuBLAS is found:
the CUDA toolkit's, or the one the `nvidia-cublas` wheel ships (as torch's CUDA wheels install it).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from rl_kernels.config import BuildConfig, EvalConfig
from rl_kernels.evaluation.artifact import load_native_library
from rl_kernels.evaluation.build import build_native_library

_LIBS = ("cublas", "cublasLt")
_ACC32 = {"fp16": 0, "fp32": 1}


class CublasNotFound(RuntimeError):
    """No cuBLAS headers + libraries were found; the message lists every place searched."""


@dataclass(frozen=True)
class CublasInstall:
    include_dir: Path
    lib_dir: Path
    libs: dict[str, Path]   # "cublas" / "cublasLt" -> the shared object to link


def _lib_file(lib_dir: Path, name: str) -> Path | None:
    """`libNAME.so` if present, else the soname file `libNAME.so.X` (wheels ship only versioned names)."""
    plain = lib_dir / f"lib{name}.so"
    if plain.is_file():
        return plain
    versioned = sorted(lib_dir.glob(f"lib{name}.so.*"), key=lambda p: len(p.name))
    return versioned[0] if versioned else None


def _install_at(include_dir: Path, lib_dirs: list[Path]) -> CublasInstall | None:
    if not (include_dir / "cublas_v2.h").is_file() or not (include_dir / "cublasLt.h").is_file():
        return None
    for lib_dir in lib_dirs:
        libs = {name: _lib_file(lib_dir, name) for name in _LIBS}
        if all(libs.values()):
            return CublasInstall(include_dir, lib_dir, {k: v for k, v in libs.items() if v is not None})
    return None


def _toolkit_roots(nvcc: str) -> list[Path]:
    roots = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    nvcc_path = shutil.which(nvcc)
    if nvcc_path:
        roots.append(Path(nvcc_path).resolve().parent.parent)
    roots.append(Path("/usr/local/cuda"))
    return roots


def _wheel_roots() -> list[Path]:
    """Package dirs under the `nvidia` namespace: nvidia/cublas (CUDA 12 wheels), nvidia/cu13, ..."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    return sorted(p for loc in spec.submodule_search_locations for p in Path(loc).iterdir() if p.is_dir())


def find_cublas(nvcc: str = "nvcc", roots: list[Path] | None = None) -> CublasInstall:
    """The first root holding cuBLAS/cuBLASLt headers and libraries; toolkit first, then wheels."""
    candidates = roots if roots is not None else _toolkit_roots(nvcc) + _wheel_roots()
    for root in candidates:
        lib_dirs = [root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"]
        for include_dir in (root / "include", root / "targets" / "x86_64-linux" / "include"):
            found = _install_at(include_dir, lib_dirs)
            if found is not None:
                return found
    searched = ", ".join(str(r) for r in candidates) or "(nothing)"
    raise CublasNotFound(
        f"cuBLAS headers (cublas_v2.h, cublasLt.h) and libraries (libcublas, libcublasLt) not found; "
        f"searched {searched}. Install the CUDA toolkit's cuBLAS or the nvidia-cublas wheel."
    )


def _link_dir(install: CublasInstall, cache_dir: Path) -> Path:
    """A dir of `libNAME.so` symlinks, so `-lcublas -lcublasLt` work against versioned-only wheels."""
    tag = hashlib.sha256(str(install.lib_dir).encode()).hexdigest()[:12]
    link_dir = cache_dir / "native" / f"cublas-link-{tag}"
    link_dir.mkdir(parents=True, exist_ok=True)
    for name, target in install.libs.items():
        link = link_dir / f"lib{name}.so"
        if link.is_symlink() and link.resolve() == target.resolve():
            continue
        tmp = link_dir / f".lib{name}.so.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)
    return link_dir


def build_cublas_library(cfg: BuildConfig) -> Path:
    """Build (or fetch from the cache) the baseline .so and return where it was written."""
    install = find_cublas(cfg.nvcc)
    link_dir = _link_dir(install, cfg.cache_dir)
    source = (resources.files("rl_kernels.evaluation") / "native" / "cublas_hgemm.cu").read_text()
    ldflags = [f"-L{link_dir}", "-Xlinker", "-rpath", "-Xlinker", str(install.lib_dir), "-lcublas", "-lcublasLt"]
    build = build_native_library("cublas_hgemm", {"cublas_hgemm.cu": source}, "cuda", cfg,
                                 include_dirs=[str(install.include_dir)], ldflags=ldflags)
    if not build.ok or build.artifact is None:
        raise RuntimeError(f"building the cuBLAS baseline library failed:\n{build.log}")
    # Written once per build key and never rewritten: rewriting a .so in place crashes any process
    # that already has it loaded, and a second load in the same process would do exactly that.
    out = cfg.cache_dir / "native" / build.key / build.artifact_name
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        tmp.write_bytes(build.artifact)
        os.replace(tmp, out)
    return out


def _declare(lib: ctypes.CDLL) -> None:
    ptrs_dims = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
    for name in ("rlk_gemmex", "rlk_lt_heuristic"):
        getattr(lib, name).argtypes = ptrs_dims
        getattr(lib, name).restype = ctypes.c_int
    lib.rlk_lt_autotune.argtypes = ptrs_dims + [ctypes.c_int]
    lib.rlk_lt_autotune.restype = ctypes.c_int
    lib.rlk_lt_set_workspace.argtypes = [ctypes.c_size_t]
    lib.rlk_lt_set_workspace.restype = ctypes.c_int
    lib.rlk_last_error.argtypes = []
    lib.rlk_last_error.restype = ctypes.c_char_p


class CublasBaselines:
    """The three cuBLAS baselines as callables on torch tensors; each writes C = A . B into `c`.

    `a` is A[MxK], `b` is B[KxN], `c` is C[MxN], all contiguous fp16 CUDA tensors on the device the
    library first ran on; `acc` is the task's accumulator ("fp16" or "fp32").
    """

    def __init__(self, lib: ctypes.CDLL, workspace_bytes: int, autotune_algos: int):
        _declare(lib)
        self._lib = lib
        self._autotune_algos = autotune_algos
        self._check(lib.rlk_lt_set_workspace(workspace_bytes), "rlk_lt_set_workspace")

    def gemmex(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, acc: str) -> None:
        self._check(self._lib.rlk_gemmex(*self._args(a, b, c, acc)), "cublasGemmEx")

    def lt_heuristic(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, acc: str) -> None:
        self._check(self._lib.rlk_lt_heuristic(*self._args(a, b, c, acc)), "cuBLASLt heuristic")

    def lt_autotuned(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, acc: str) -> None:
        """The first call per (M, N, K, acc) times up to `autotune_algos` algorithms and keeps the fastest."""
        args = self._args(a, b, c, acc)
        self._check(self._lib.rlk_lt_autotune(*args, self._autotune_algos), "cuBLASLt autotuned")

    @staticmethod
    def _args(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, acc: str) -> tuple[int, ...]:
        if acc not in _ACC32:
            raise ValueError(f"accumulator {acc!r} must be 'fp16' or 'fp32'")
        for name, t in (("a", a), ("b", b), ("c", c)):
            if t.dtype != torch.float16 or not t.is_cuda or t.dim() != 2 or not t.is_contiguous():
                raise ValueError(f"{name} must be a contiguous 2-D fp16 CUDA tensor, got {t.dtype} "
                                 f"{tuple(t.shape)} on {t.device} (contiguous={t.is_contiguous()})")
        m, k = a.shape
        n = b.shape[1]
        if b.shape[0] != k or tuple(c.shape) != (m, n):
            raise ValueError(f"shapes do not chain: a {tuple(a.shape)}, b {tuple(b.shape)}, c {tuple(c.shape)}")
        return a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, _ACC32[acc]

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: {self._lib.rlk_last_error().decode(errors='replace')}")


def load_cublas_baselines(cfg: EvalConfig, library: Path) -> CublasBaselines:
    """Load the baseline library (built by `build_cublas_library`) and configure it from `cfg.baselines`."""
    lib = load_native_library(library)
    return CublasBaselines(lib, cfg.baselines.cublaslt_workspace_mb << 20, cfg.baselines.cublaslt_autotune_algos)
