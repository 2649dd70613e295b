"""Calling exported hgemm kernels from PyTorch: the kernel library, its dispatch and the custom op.

A library is a directory that `rl-kernels export` wrote: `manifest.json` (every kernel with its
shape, accumulator, file hash and the measurements behind each decision) and `kernels/*.so` (one
built kernel each, the plain-C `rlk_hgemm` ABI of rlk_abi.h).  Dispatch per (M, N, K, accumulator)
follows the manifest's plan, which export made from measurements on the device it exported for:
the exact kernel, or the nearest larger covered kernel on zero-padded inputs, or `torch.matmul`;
never a guess.  A call the plan does not cover (another shape, dtype or device, non-contiguous
inputs) runs `torch.matmul`, and `KernelLibrary.explain()` counts why.

This module imports only torch and the standard library: export copies it into every package it
writes, so an exported library runs where rl_kernels is not installed.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import platform
import struct
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

FORMAT = 2
ABI_VERSION = 2   # RLK_ABI_VERSION of native/rlk_abi.h: rlk_hgemm with the caller's stream
MANIFEST = "manifest.json"
PATHS = ("exact", "pad", "matmul")
MAX_DIM = 8

log = logging.getLogger("rl_kernels.ops")

# c10::ScalarType numbering (rlk_abi.h); dtypes outside it are passed as -1 (unknown to the shim).
_DTYPE_CODE: dict[torch.dtype, int] = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
    torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15,
}
# rlk_tensor: void* data; int64 sizes[8]; int64 strides[8]; int32 dim, dtype, device_type, device_index
_RLK_TENSOR = struct.Struct(f"@P{MAX_DIM}q{MAX_DIM}q4i")  # native layout == the C struct
_ERR_LEN = 4096

HgemmEntry = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


class LibraryError(RuntimeError):
    """A kernel library that cannot be used here: missing, corrupted, or built for another host."""


def load_native_library(so_path: Path) -> ctypes.CDLL:
    """ctypes-loads a built shared library (e.g. the cuBLAS baseline), with a readable error."""
    try:
        return ctypes.CDLL(str(so_path), mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        raise RuntimeError(f"cannot load native library {so_path}: {exc}") from exc


def open_hgemm(so_path: Path) -> Any:
    """The artifact's `rlk_hgemm` as a ctypes function, after checking it speaks this ABI (the
    function keeps its library loaded)."""
    lib = load_native_library(so_path)
    try:
        fn = lib.rlk_hgemm
        version = lib.rlk_abi_version
    except AttributeError as exc:
        raise RuntimeError(f"{so_path} does not export rlk_hgemm and rlk_abi_version (not an hgemm artifact "
                           "of this rl_kernels: build or export it again)") from exc
    version.restype = ctypes.c_int
    if version() != ABI_VERSION:
        raise RuntimeError(f"{so_path} was built for hgemm ABI {version()}, this runtime calls ABI {ABI_VERSION}: "
                           "build or export it again")
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_char_p, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def load_hgemm_entry(so_path: Path) -> HgemmEntry:
    """Returns f(a, b, b_col_major, c) that runs the kernel's `rlk_hgemm` on torch tensors, in the
    order of torch's current stream on their device (under CUDA graph capture too, rlk_stream.h).

    Per-call cost is four struct packs, a stream lookup and one ctypes call (a few µs).  The returned
    function reuses one argument buffer, so it must not be called from two threads at once.
    """
    fn = open_hgemm(so_path)
    size = _RLK_TENSOR.size
    args = ctypes.create_string_buffer(4 * size)
    base = ctypes.addressof(args)
    addrs = (base, base + size, base + 2 * size, base + 3 * size)
    err = ctypes.create_string_buffer(_ERR_LEN)
    pack = _RLK_TENSOR.pack_into
    pad = (0,) * MAX_DIM
    codes = _DTYPE_CODE

    def _fill(offset: int, t: torch.Tensor) -> None:
        dim = t.dim()
        if dim > MAX_DIM:
            raise RuntimeError(f"tensors of more than {MAX_DIM} dims are not supported (got {dim})")
        dev = t.device
        pack(args, offset, t.data_ptr(), *t.shape, *pad[dim:], *t.stride(), *pad[dim:], dim,
             codes.get(t.dtype, -1), 1 if dev.type == "cuda" else 0, dev.index or 0)

    def hgemm(a: torch.Tensor, b: torch.Tensor, b_col_major: torch.Tensor, c: torch.Tensor) -> None:
        _fill(0, a)
        _fill(size, b)
        _fill(2 * size, b_col_major)
        _fill(3 * size, c)
        stream = _current_stream(c.device) if c.device.type == "cuda" else None
        if fn(addrs[0], addrs[1], addrs[2], addrs[3], stream, err, _ERR_LEN) != 0:
            raise RuntimeError(err.value.decode(errors="replace"))

    return hgemm


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)   # ~10x cheaper than the public call


def _current_stream(device: torch.device) -> int:
    """The raw cudaStream_t of torch's current stream on `device` (0: the legacy default stream)."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def relative_gap(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| in fp32: how far a kernel's product is from a reference."""
    x, ref = x.float(), ref.float()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cpu_model() -> str:
    """The host CPU's model name (a kernel built with -march=native may not run on another)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cuda_arch(device: torch.device | int | None = None) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


@dataclass(frozen=True)
class Choice:
    """What one call runs, and why."""

    path: str                               # "exact" | "pad" | "matmul"
    kernel: str | None = None               # the kernel's id in the manifest (exact and pad)
    shape: tuple[int, int, int] | None = None   # the kernel's (M, N, K): the call's own, or the padded one
    reason: str = ""


Key = tuple[int, int, int, str]   # (M, N, K, accumulator)


class KernelLibrary:
    """An exported directory, checked against this host when loaded, its kernels loaded on first use.

        lib = KernelLibrary("exported/rlk_hgemm_cuda")   # LibraryError: corrupted, other arch, ...
        c = lib.hgemm(a, b)                              # a: [M, K] fp16, b: [K, N] fp16 -> [M, N]
        lib.explain()                                    # the plan and what the calls did
    """

    def __init__(self, root: str | Path, *, allow_other_cpu: bool = False) -> None:
        self.root = Path(root)
        path = self.root / MANIFEST
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise LibraryError(f"{path}: no manifest, so {self.root} is not a library written by rl-kernels export") from None
        except json.JSONDecodeError as exc:
            raise LibraryError(f"{path} is not valid JSON ({exc}): the library is corrupted; export it again") from None
        if manifest.get("format") != FORMAT:
            raise LibraryError(f"{path}: format {manifest.get('format')!r}, this runtime reads format {FORMAT} "
                               "(kernels of another hgemm ABI): export the library again")
        self.manifest = manifest
        self.backend: str = manifest["backend"]
        _check_host(manifest, path, allow_other_cpu)
        self.kernels: dict[str, dict[str, Any]] = {}
        for k in manifest["kernels"]:
            file = self.root / k["file"]
            if not file.is_file():
                raise LibraryError(f"kernel {k['id']} ({k['task']}): {file} is missing; export the library again")
            digest = file_sha256(file)
            if digest != k["sha256"]:
                raise LibraryError(f"kernel {k['id']} ({k['task']}): {file} is corrupted (sha256 {digest[:16]}..., "
                                   f"the manifest says {k['sha256'][:16]}...); export the library again")
            self.kernels[k["id"]] = k
        self.dispatch: dict[str, Any] | None = manifest.get("dispatch")   # the C++ dispatch, when exported
        if self.dispatch is not None:
            file = self.root / self.dispatch["file"]
            if not file.is_file() or file_sha256(file) != self.dispatch["sha256"]:
                raise LibraryError(f"{file}: the C++ dispatch is missing or corrupted; export the library again")
        self.plan: dict[Key, dict[str, Any]] = {}
        for p in manifest["plan"]:
            if p["path"] not in PATHS or (p["path"] != "matmul" and p.get("kernel") not in self.kernels):
                raise LibraryError(f"{path}: plan entry {p} names no kernel of this library")
            self.plan[(p["m"], p["n"], p["k"], p["accumulator"])] = p
        self._entries: dict[str, HgemmEntry] = {}
        self._lock = threading.Lock()   # a loaded entry reuses one argument buffer
        self.calls: Counter[tuple[int, int, int, str, str, str]] = Counter()
        self._native: Any = None          # torch.ops.<namespace> of the loaded C++ dispatch
        self._native_fns: list[Any] = []  # its kernels' ctypes functions, which keep their libraries loaded
        self.native_reason: str | None = None   # why the C++ dispatch is not used here, once asked

    def choose(self, a: torch.Tensor, b: torch.Tensor, accumulator: str = "fp32", capturing: bool = False) -> Choice:
        """The path for a @ b: the plan's, when the call is one the plan measured (and, while a CUDA
        graph is being captured, only when export captured and replayed that kernel correctly)."""
        if a.dim() != 2 or b.dim() != 2:
            return Choice("matmul", reason=f"{a.dim()}-d @ {b.dim()}-d: the kernels take 2-d operands")
        if a.shape[1] != b.shape[0]:
            return Choice("matmul", reason="shapes do not multiply (torch.matmul raises)")
        if a.dtype != torch.float16 or b.dtype != torch.float16:
            return Choice("matmul", reason=f"{_dtype_name(a.dtype)} @ {_dtype_name(b.dtype)}: the kernels take float16")
        if a.device.type != self.backend or b.device != a.device:
            return Choice("matmul", reason=f"operands on {a.device} and {b.device}: the kernels are {self.backend} kernels")
        if not (a.is_contiguous() and b.is_contiguous()):
            return Choice("matmul", reason="non-contiguous operand (a transposed view, a slice)")
        m, k = a.shape
        n = b.shape[1]
        entry = self.plan.get((m, n, k, accumulator))
        if entry is None:
            return Choice("matmul", reason=f"{m}x{n}x{k} ({accumulator}) was not measured at export")
        if entry["path"] == "matmul":
            return Choice("matmul", reason=entry["reason"])
        kernel = self.kernels[entry["kernel"]]
        if capturing and kernel.get("capturable") is not True:
            return Choice("matmul", reason=_capture_reason(entry["kernel"], kernel))
        return Choice(entry["path"], entry["kernel"], (kernel["m"], kernel["n"], kernel["k"]), entry["reason"])

    def hgemm(self, a: torch.Tensor, b: torch.Tensor, b_col_major: torch.Tensor | None = None,
              accumulator: str = "fp32") -> torch.Tensor:
        """a @ b through the chosen path.  `b_col_major` (b's [N, K] transpose, contiguous, e.g. an
        nn.Linear weight) saves the transpose copy the kernels' ABI otherwise costs per call.  Under CUDA
        graph capture a call is counted once, when captured (replays do not come through here)."""
        capturing = a.is_cuda and torch.cuda.is_current_stream_capturing()
        choice = self.choose(a, b, accumulator, capturing)
        m, n = (a.shape[0], b.shape[-1]) if a.dim() == 2 and b.dim() == 2 else (-1, -1)
        k = a.shape[-1] if a.dim() else -1
        self.calls[(m, n, k, accumulator, choice.path, choice.reason)] += 1
        if choice.path == "matmul":
            log.debug("hgemm %sx%sx%s %s: torch.matmul (%s)", m, n, k, accumulator, choice.reason)
            return torch.matmul(a, b)
        assert choice.kernel is not None and choice.shape is not None
        entry = self._entry(choice.kernel)
        if choice.path == "exact":
            if b_col_major is None or tuple(b_col_major.shape) != (n, k) or not b_col_major.is_contiguous():
                b_col_major = b.t().contiguous()
            c = torch.empty((m, n), dtype=torch.float16, device=a.device)
            with self._lock:
                entry(a, b, b_col_major.view(k, n), c)   # the ABI's as_col_major: B^T's storage, B's shape
            return c
        mp, np_, kp = choice.shape
        a_p = a.new_zeros((mp, kp))
        a_p[:m, :k] = a
        b_p = b.new_zeros((kp, np_))
        b_p[:k, :n] = b
        c_p = torch.empty((mp, np_), dtype=torch.float16, device=a.device)
        with self._lock:
            entry(a_p, b_p, b_p.t().contiguous().view(kp, np_), c_p)
        return c_p[:m, :n].contiguous()

    def native_op(self) -> Any:
        """The C++ dispatch's op (`<namespace>::hgemm`, same arguments as `hgemm`) with this library's
        plan, or None where it cannot load here (`native_reason` says why; the Python dispatch then runs)."""
        if self._native is not None or self.native_reason is not None:
            return None if self._native is None else self._native.hgemm
        d = self.dispatch
        if d is None:
            self.native_reason = "this library was exported without the C++ dispatch (export.cpp_dispatch=false)"
        elif d["torch"] != torch.__version__:
            self.native_reason = f"the C++ dispatch was built for torch {d['torch']}, this is torch {torch.__version__}"
        else:
            self.native_reason = _load_dispatch(d["namespace"], (self.root / d["file"]).resolve())
        if self.native_reason is not None:
            log.info("%s: Python dispatch (%s)", self.root, self.native_reason)
            return None
        ops = getattr(torch.ops, d["namespace"])
        addresses: dict[str, int] = {}   # kernel id -> its rlk_hgemm (an exact and a padded shape share one)
        for (m, n, k, acc), entry in self.plan.items():
            address, shape, reason = 0, (0, 0, 0), entry.get("reason", "")
            capturable = False
            if entry["path"] != "matmul":
                kernel = self.kernels[entry["kernel"]]
                if entry["kernel"] not in addresses:
                    fn = open_hgemm(self.root / kernel["file"])
                    self._native_fns.append(fn)
                    addresses[entry["kernel"]] = ctypes.cast(fn, ctypes.c_void_p).value or 0
                address = addresses[entry["kernel"]]
                shape = (kernel["m"], kernel["n"], kernel["k"])
                capturable = kernel.get("capturable") is True
                reason = _capture_reason(entry["kernel"], kernel)
            ops.set_entry(m, n, k, acc, entry["path"], address, *shape, capturable, reason)
        self._native = ops
        return ops.hgemm

    def explain(self) -> list[dict[str, Any]]:
        """Per planned shape: the decision, its measurements and how many calls took it (through either
        dispatch); then every shape that calls brought and the plan did not hold, with the reason they
        ran torch.matmul."""
        calls = Counter(self.calls)
        if self._native is not None:
            for line in self._native.calls():
                m, n, k, acc, path, count, reason = line.split("\t", 6)
                calls[(int(m), int(n), int(k), acc, path, reason)] += int(count)
        seen: Counter[Key] = Counter()
        for (m, n, k, acc, path, _), count in calls.items():
            if (m, n, k, acc) in self.plan and path == self.plan[(m, n, k, acc)]["path"]:
                seen[(m, n, k, acc)] += count
        rows = [dict(entry, calls=seen[key]) for key, entry in sorted(self.plan.items())]
        for (m, n, k, acc, path, reason), count in sorted(calls.items()):
            if (m, n, k, acc) not in self.plan or path != self.plan[(m, n, k, acc)]["path"]:
                rows.append({"m": m, "n": n, "k": k, "accumulator": acc, "path": path, "reason": reason,
                             "calls": count})
        return rows

    def _entry(self, kernel_id: str) -> HgemmEntry:
        entry = self._entries.get(kernel_id)
        if entry is None:
            file = self.root / self.kernels[kernel_id]["file"]
            try:
                entry = load_hgemm_entry(file)
            except RuntimeError as exc:
                raise LibraryError(f"kernel {kernel_id}: {exc}") from exc
            self._entries[kernel_id] = entry
        return entry


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")   # float32; the C++ dispatch writes the same


def _capture_reason(kernel_id: str, kernel: dict[str, Any]) -> str:
    return f"CUDA graph capture: kernel {kernel_id} is not capturable ({kernel.get('capture', 'not probed at export')})"


_LOADED_DISPATCH: dict[str, Path] = {}   # namespace -> the file this process loaded it from


def _load_dispatch(namespace: str, file: Path) -> str | None:
    """Loads a C++ dispatch once per process; the reason it cannot, or None.  A namespace is
    registered once per process (torch aborts on a second registration), so a second library file
    of the same package name is refused rather than loaded."""
    held = _LOADED_DISPATCH.get(namespace)
    if held is None:
        try:
            torch._C._dispatch_find_schema_or_throw(f"{namespace}::hgemm", "")
            return f"{namespace}::hgemm is already registered in this process by another library"
        except RuntimeError:
            pass
        try:
            torch.ops.load_library(str(file))
        except OSError as exc:
            return f"the C++ dispatch {file} does not load here: {exc}"
        _LOADED_DISPATCH[namespace] = file
        return None
    if held != file:
        return f"{namespace} is already loaded in this process from {held} (one library per package name)"
    return None


def _check_host(manifest: dict[str, Any], path: Path, allow_other_cpu: bool) -> None:
    """Refuses a library whose kernels cannot run here, before any of them is loaded."""
    backend = manifest["backend"]
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise LibraryError(f"{path}: cuda kernels, and no CUDA device is visible here")
        here = cuda_arch()
        if here != manifest["arch"]:
            raise LibraryError(f"{path}: kernels built for {manifest['arch']} ({manifest['device']}), this device "
                               f"is {here} ({torch.cuda.get_device_name()}); export the library on this device")
        return
    if backend != "cpu":
        raise LibraryError(f"{path}: unknown backend {backend!r}")
    if manifest["machine"] != platform.machine():
        raise LibraryError(f"{path}: kernels built for {manifest['machine']}, this host is {platform.machine()}")
    native = any(f.startswith(("-march=native", "-mcpu=native")) for f in manifest.get("build_flags", []))
    if native and manifest["device"] != cpu_model() and not allow_other_cpu:
        raise LibraryError(f"{path}: kernels built with -march=native on {manifest['device']!r}, this host is "
                           f"{cpu_model()!r} (it may lack their instructions); export the library here, or load "
                           "it with allow_other_cpu=True")


def register_op(qualname: str, library: Callable[[], KernelLibrary]) -> Any:
    """Registers `qualname` ("ns::hgemm") as a torch.library custom op over `library()`'s dispatch,
    with a fake implementation, so torch.compile traces it as one opaque call."""

    @torch.library.custom_op(qualname, mutates_args=())
    def hgemm(a: torch.Tensor, b: torch.Tensor, b_col_major: Optional[torch.Tensor] = None,
              accumulator: str = "fp32") -> torch.Tensor:
        return library().hgemm(a, b, b_col_major, accumulator)

    @hgemm.register_fake
    def _(a: torch.Tensor, b: torch.Tensor, b_col_major: Optional[torch.Tensor] = None,
          accumulator: str = "fp32") -> torch.Tensor:
        return torch.matmul(a, b)

    return hgemm


@contextlib.contextmanager
def patch_linear(model: torch.nn.Module, library: KernelLibrary, op: Callable[..., torch.Tensor]) -> Iterator[int]:
    """Inside the block, every nn.Linear of `model` with a float16 weight on the library's device
    type computes x @ W.T through `op`; yields how many layers it patched.

    The kernels' ABI takes B both row- and column-major: W is the column-major one, and the row-major
    copy (W.T, contiguous) is made once per weight version and kept while the block lasts (memory for
    speed: one more copy of each patched weight)."""
    patched: list[torch.nn.Module] = []
    for module in model.modules():
        if (isinstance(module, torch.nn.Linear) and module.weight.dtype == torch.float16
                and module.weight.device.type == library.backend and module.weight.is_contiguous()):
            module.forward = types.MethodType(_linear_forward(op), module)
            patched.append(module)
    try:
        yield len(patched)
    finally:
        for module in patched:
            del module.forward
            module.__dict__.pop("_rlk_weight_t", None)


def _linear_forward(op: Callable[..., torch.Tensor]) -> Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]:
    def forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        kept = self.__dict__.get("_rlk_weight_t")
        if kept is None or kept[0] != (w.data_ptr(), w._version):
            kept = ((w.data_ptr(), w._version), w.detach().t().contiguous())
            self.__dict__["_rlk_weight_t"] = kept
        y = op(x.reshape(-1, w.shape[1]).contiguous(), kept[1], w.detach())
        y = y.reshape(*x.shape[:-1], w.shape[0])
        return y + self.bias if self.bias is not None else y
    return forward
