"""Build step: compile candidates into self-contained, shippable artifacts, never touching a GPU.

- hgemm candidates (CUDA-L2 layout, one TU) are compiled against a small torch *shim*
  (native/shim) into one `.so` exporting the plain-C `rlk_hgemm` (native/rlk_abi.h).
- module candidates (KernelBench layout) are run once in a subprocess to capture their load_inline
  calls (capture.py); the captured extensions are built with torch's own flags into `module.zip`:
  the binding (main.cpp) with a precompiled torch/extension.h, the CUDA file against slim torch
  headers first (slim_torch.py), against torch's own when they lack what it uses.
- generic native libraries (e.g. the cuBLAS baseline) are built by `build_native_library`.

Every build goes through a content-addressed cache (see `_cached_build`), so the same source with
the same flags and toolchain is compiled once per cache directory, even across processes.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
import zipfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import filelock

from rl_kernels.config import BuildConfig, EvalConfig
from rl_kernels.evaluation import confine, ninja, nvcc_split, sandbox, slim_torch
from rl_kernels.evaluation.artifact import MANIFEST, generate_inline_sources, sources_digest
from rl_kernels.evaluation.evidence import check_artifact
from rl_kernels.evaluation.launches import registered_kernels
from rl_kernels.evaluation.flags import check_flags
from rl_kernels.evaluation.forkserver import ForkServer, ForkServerError
from rl_kernels.evaluation.guards import extract_native_sources, static_check
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.evaluation.refusals import NO_SETTING, REASON_TEXT
from rl_kernels.host_share import SharedUse, host_share
from rl_kernels.types import Build, Task

BackendName = Literal["cpu", "cuda"]

NATIVE_DIR = Path(__file__).resolve().parent / "native"
SHIM_DIR = NATIVE_DIR / "shim"
HGEMM_ARTIFACT = "hgemm.so"
MODULE_ARTIFACT = "module.zip"
_BUILD_FORMAT = 3  # bump when the build recipe changes in a way the key does not see


# ----------------------------------------------------------------------------------------------
# confinement of the steps that read candidate input


def _confined(cfg: BuildConfig, writable: Path, readable: list[str] = ()) -> ninja.Confined:
    """A build step sees the host read-only with its secrets and the cache hidden, writes only
    `writable` (also its HOME and TMPDIR), and has no network (`isolation: namespaces`)."""
    env = sandbox.environment(writable, None)
    if cfg.isolation == "process":
        return ninja.Confined(argv=lambda cmd: cmd, env=env)
    confine.probe()
    conf = confine.Confinement(
        readable=[*confine.python_paths(), *readable], writable=[str(writable)],
        hide=confine.hidden_places([str(Path(cfg.cache_dir).resolve())]), memory_mb=cfg.memory_limit_mb)
    return ninja.Confined(argv=lambda cmd: confine.confined_argv(cmd, conf), env=env)


def _flag_dirs(flags: list[str]) -> list[str]:
    """Directories that -I / -L / -isystem flags name (a build must be able to read them)."""
    dirs, take = [], False
    for flag in flags:
        if take:
            dirs.append(flag)
            take = False
        elif flag in ("-isystem", "-I", "-L"):
            take = True
        elif flag.startswith(("-I", "-L")) and len(flag) > 2:
            dirs.append(flag[2:])
    return [d for d in dirs if Path(d).is_absolute()]


# ----------------------------------------------------------------------------------------------
# toolchain


def cutlass_include_dirs() -> list[str]:
    """CUTLASS / CuTe headers shipped in the nvidia-cutlass wheel (no system CUDA samples needed);
    none when the wheel is not installed (kernels that include them then fail with `CUTLASS_MISSING`)."""
    try:
        import cutlass_library
    except ModuleNotFoundError:
        return []
    root = Path(cutlass_library.__file__).resolve().parent / "source"
    dirs = [root / "include", root / "tools" / "util" / "include"]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        raise RuntimeError(f"nvidia-cutlass wheel lacks its headers: {missing}")
    return [str(d) for d in dirs]


@functools.lru_cache(maxsize=None)
def _cutlass_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return "absent"


CUTLASS_MISSING = ("this kernel includes CUTLASS/CuTe headers, and the nvidia-cutlass wheel that provides "
                   "them is not installed here: pip install nvidia-cutlass (a dependency of rl_kernels)")
_CUTLASS_INCLUDE_FAILED = re.compile(r"fatal error: (?:cutlass|cute)/[\w/.]+: No such file or directory")


@functools.lru_cache(maxsize=None)
def _tool_identity(exe: str) -> str:
    """`exe --version` output: part of every cache key, so a compiler upgrade rebuilds."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return f"{exe}: not found"
    return out.stdout + out.stderr


@functools.lru_cache(maxsize=None)
def _native_arch(cxx: str) -> str:
    """What -march=native means on this host, so hosts with different CPUs never share artifacts."""
    try:
        out = subprocess.run([cxx, "-###", "-march=native", "-E", "-x", "c++", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return ""
    return " ".join(line for line in out.stderr.splitlines() if "-march=" in line)


def _toolchain(backend: BackendName, cfg: BuildConfig) -> dict[str, str]:
    ident = {"cxx": _tool_identity(cfg.cxx)}
    if backend == "cuda":
        ident["nvcc"] = _tool_identity(cfg.nvcc)
    if "-march=native" in cfg.cpu_arch_flags or "-march=native" in cfg.cxx_flags:
        ident["native_arch"] = _native_arch(cfg.cxx)
    return ident


@functools.lru_cache(maxsize=None)
def _native_dir_digest() -> str:
    """Hash of the shim and ABI headers: changing them must invalidate hgemm builds."""
    h = hashlib.sha256()
    for path in sorted(NATIVE_DIR.rglob("*.h")):
        h.update(str(path.relative_to(NATIVE_DIR)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _gencode_flags(archs: list[str], embed_ptx: bool = False) -> list[str]:
    """sm_90a -> -gencode arch=compute_90a,code=sm_90a (SASS for exactly the configured GPUs), plus
    PTX of the newest arch with `embed_ptx` (the driver JIT-compiles it on newer GPUs)."""
    flags: list[str] = []
    for arch in archs:
        flags += ["-gencode", f"arch=compute_{arch[3:]},code={arch}"]
    if embed_ptx:
        newest = max(archs, key=_arch_version)
        flags += ["-gencode", f"arch=compute_{newest[3:]},code=compute_{newest[3:]}"]
    return flags


def _arch_version(arch: str) -> tuple[int, int]:
    digits = "".join(ch for ch in arch[3:] if ch.isdigit())
    return int(digits[:-1]), int(digits[-1])


def runnable_arch(archs: list[str], embed_ptx: bool, capability: tuple[int, int]) -> str | None:
    """Which configured arch a device of this compute capability can run, else None.

    SASS for sm_XY runs on the same major with minor >= Y; sm_XYa only on exactly X.Y (arch-specific
    features); sm_XYf on the same major (family).  Embedded PTX of compute_XY (not `a`) JIT-compiles
    on any device of capability >= X.Y.
    """
    for arch in archs:
        major, minor = _arch_version(arch)
        if arch.endswith("a"):
            fits = (major, minor) == capability
        else:
            fits = major == capability[0] and capability[1] >= minor
        if fits:
            return arch
    if embed_ptx:
        newest = max(archs, key=_arch_version)
        if not newest.endswith("a") and capability >= _arch_version(newest):
            return f"compute_{newest[3:]} (PTX)"
    return None


# ----------------------------------------------------------------------------------------------
# cache


@dataclass
class _Outcome:
    ok: bool
    log: str
    reason: str | None = None
    cacheable: bool = True   # False when the result says nothing about the source (timeout, killed)
    kernels: list[str] = field(default_factory=list)   # mangled names of the kernels it registers


def _key(material: dict) -> str:
    blob = json.dumps({"format": _BUILD_FORMAT, **material}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _truncate(log: str, limit: int) -> str:
    """Keeps the head (first errors matter most) and the tail (the final failure line)."""
    if len(log) <= limit:
        return log
    tail = limit // 4
    cut = len(log) - limit
    return f"{log[: limit - tail]}\n... [{cut} characters cut] ...\n{log[-tail:]}"


def _read_cached(final: Path, key: str, artifact_name: str) -> Build | None:
    meta_path = final / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    artifact = (final / artifact_name).read_bytes() if meta["ok"] else None
    return Build(key=key, ok=meta["ok"], artifact=artifact, artifact_name=artifact_name,
                 log=(final / "build.log").read_text(), seconds=meta["seconds"], cached=True,
                 reason=meta["reason"], kernels=meta.get("kernels", []))


def _cached_build(key: str, artifact_name: str, cfg: BuildConfig, build: Callable[[Path, Path], _Outcome]) -> Build:
    """Serves `key` from the cache or runs `build(work_dir, artifact_path)` once, under a file lock.

    The result goes to a temp dir that is renamed into place, so readers never see half a build.
    Compile errors are cached (the same broken source is not rebuilt); timeouts are not, since
    they depend on how loaded the machine was.
    """
    shard = Path(cfg.cache_dir) / "builds" / key[:2]
    final = shard / key
    hit = _read_cached(final, key, artifact_name)
    if hit is not None:
        return hit
    shard.mkdir(parents=True, exist_ok=True)
    # Waiting on a peer building the same key is bounded by that peer's own timeout.
    with filelock.FileLock(str(shard / f"{key}.lock"), timeout=cfg.timeout_s * 3 + 600):
        hit = _read_cached(final, key, artifact_name)
        if hit is not None:
            return hit
        tmp = Path(tempfile.mkdtemp(prefix=f"{key[:16]}.", suffix=".tmp", dir=shard))
        try:
            out_dir = tmp / "out"
            work = tmp / "work"
            out_dir.mkdir()
            work.mkdir()
            t0 = time.monotonic()
            outcome = build(work, out_dir / artifact_name)
            seconds = time.monotonic() - t0
            log = _truncate(outcome.log, cfg.log_max_chars)
            result = Build(key=key, ok=outcome.ok, artifact_name=artifact_name, log=log, seconds=seconds,
                           cached=False, reason=outcome.reason, kernels=outcome.kernels)
            if outcome.ok:
                result.artifact = (out_dir / artifact_name).read_bytes()
            if outcome.cacheable:
                (out_dir / "build.log").write_text(log)
                meta = {"ok": outcome.ok, "reason": outcome.reason, "seconds": seconds, "kernels": outcome.kernels}
                (out_dir / "meta.json").write_text(json.dumps(meta))
                os.rename(out_dir, final)
            return result
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


_KILLED_MARKERS = ("interrupted by user", "Killed signal terminated program", "terminated by signal")


def _ninja_outcome(res: ninja.ProcResult, cfg: BuildConfig) -> _Outcome:
    if res.timed_out:
        return _Outcome(False, res.output + f"\nbuild timed out after {cfg.timeout_s:.0f} s",
                        Reason.COMPILE_TIMEOUT.value, cacheable=False)
    if res.returncode != 0:
        # A build whose ninja or compiler was killed from outside (a dying actor, the OOM killer)
        # failed for reasons unrelated to the source: report it, but never cache it.
        if res.returncode < 0 or any(m in res.output for m in _KILLED_MARKERS):
            return _Outcome(False, res.output, Reason.COMPILE_INTERRUPTED.value, cacheable=False)
        return _Outcome(False, nvcc_split.without_repeated_errors(res.output), Reason.COMPILE_ERROR.value)
    return _Outcome(True, res.output)


def _malformed(key_material: dict, message: str) -> Build:
    return Build(key=_key(key_material), ok=False, artifact_name="", log=message, reason=Reason.MALFORMED.value)


# ----------------------------------------------------------------------------------------------
# native libraries (hgemm candidates and baselines)


_SOURCE_EXTS = (".cu", ".cpp", ".cc", ".cxx", ".c")


def _nvcc_edges(cmd: list[str], src: str, obj: str, work: Path, cfg: BuildConfig) -> list[ninja.Edge]:
    """`cmd` (nvcc ... -c src -o obj) as nvcc's steps with its two chains in parallel where
    `split_nvcc` is on and nvcc_split knows the dry run; else as one step."""
    split = nvcc_split.split_compile(cmd, src, work, f"{obj}.nvcc") if cfg.split_nvcc else None
    return split or [ninja.Edge([obj], [src], cmd, f"compile {src}")]


def _native_edges(backend: BackendName, cfg: BuildConfig, work: Path, compile_files: list[str],
                  include_dirs: list[str], ldflags: list[str], out_path: str, defines: list[str] = (),
                  python_symbols: bool = False) -> list[ninja.Edge]:
    """Per-file compile edges plus one link edge.  CUDA links through nvcc, which pulls in the
    static cudart: the artifact then needs only the driver on the GPU host.  Every symbol must
    resolve at link time, except, with `python_symbols`, the Python C API's (pybind11 code that
    torch's extension header instantiates; the interpreter loading the artifact provides them)."""
    incs = [*defines, *(f"-I{d}" for d in include_dirs)]
    host_flags = [*cfg.cxx_flags, *cfg.cpu_arch_flags, "-fopenmp"] if backend == "cpu" else [*cfg.cxx_flags]
    edges, objects = [], []
    for src in compile_files:
        obj = f"{src}.o"
        if src.endswith(".cu"):
            cmd = [cfg.nvcc, *cfg.nvcc_flags, *_gencode_flags(cfg.cuda_archs, cfg.embed_ptx), "-Xcompiler", "-fPIC", *incs,
                   "-c", src, "-o", obj]
            edges += _nvcc_edges(cmd, src, obj, work, cfg)
        else:
            cmd = [cfg.cxx, *host_flags, "-fPIC", *incs, "-c", src, "-o", obj]
            edges.append(ninja.Edge([obj], [src], cmd, f"compile {src}"))
        objects.append(obj)
    strict = [] if python_symbols else ["-Xlinker", "--no-undefined"] if backend == "cuda" else ["-Wl,--no-undefined"]
    if backend == "cuda":
        link = [cfg.nvcc, "-shared", *_gencode_flags(cfg.cuda_archs, cfg.embed_ptx), *objects, "-o", out_path,
                *ldflags, *strict]
    else:
        link = [cfg.cxx, "-shared", "-fopenmp", *objects, "-o", out_path, *ldflags, *strict]
    edges.append(ninja.Edge([out_path], objects, link, f"link {Path(out_path).name}"))
    return edges


def _build_native(work: Path, artifact: Path, files: dict[str, str], compile_files: list[str],
                  backend: BackendName, cfg: BuildConfig, include_dirs: list[str], ldflags: list[str],
                  defines: list[str] = (), python_symbols: bool = False) -> _Outcome:
    for name, text in files.items():
        (work / name).write_text(text)
    edges = _native_edges(backend, cfg, work, compile_files, include_dirs, ldflags, str(artifact), list(defines),
                          python_symbols)
    confined = _confined(cfg, work.parent, [*include_dirs, *_flag_dirs(ldflags)])
    return _ninja_outcome(ninja.run_ninja(work, edges, cfg.timeout_s, confined=confined), cfg)


def build_native_library(name: str, sources: dict[str, str], backend: BackendName, cfg: BuildConfig,
                         include_dirs: list[str] = (), ldflags: list[str] = (), defines: list[str] = (),
                         identity: dict[str, str] | None = None) -> Build:
    """Builds `<name>.so` from `sources` (file name -> text; headers are written, not compiled);
    `identity` names what else the result depends on (part of the cache key)."""
    include_dirs, ldflags, defines = list(include_dirs), list(ldflags), list(defines)
    material = {"kind": "native", "name": name, "backend": backend, "sources": sources,
                "include_dirs": include_dirs, "ldflags": ldflags, "defines": defines, "cfg": _flag_material(backend, cfg),
                "toolchain": _toolchain(backend, cfg), **({"identity": identity} if identity else {})}
    bad = [f for f in sources if "/" in f or f.startswith(".")]
    if bad:
        return _malformed(material, f"source names must be plain file names, got {bad}")
    compile_files = sorted(f for f in sources if f.endswith(_SOURCE_EXTS))
    if not compile_files:
        return _malformed(material, f"no compilable source among {sorted(sources)}")
    if backend == "cpu" and any(f.endswith(".cu") for f in compile_files):
        return Build(key=_key(material), ok=False, log="CUDA sources cannot be built for the cpu backend",
                     reason=Reason.COMPILE_ERROR.value)
    artifact_name = f"{name}.so"
    return _cached_build(_key(material), artifact_name, cfg, lambda work, art: _build_native(
        work, art, sources, compile_files, backend, cfg, include_dirs, ldflags, defines))


def build_torch_library(name: str, sources: dict[str, str], backend: BackendName, cfg: BuildConfig,
                        defines: list[str] = ()) -> Build:
    """A native library against this torch's headers and libraries (e.g. ops registered from C++):
    it loads only into a process running the same torch build, which the cache key names."""
    cuda = backend == "cuda"
    return build_native_library(name, sources, backend, cfg, [*_torch_include_dirs(cuda, cfg), str(NATIVE_DIR)],
                                _torch_link_flags(cuda, cfg), [*_torch_flags(name), *defines], _torch_identity())


def _flag_material(backend: BackendName, cfg: BuildConfig) -> dict:
    if backend == "cuda":
        return {"nvcc_flags": cfg.nvcc_flags, "archs": cfg.cuda_archs, "cxx_flags": cfg.cxx_flags,
                "embed_ptx": cfg.embed_ptx}
    return {"cxx_flags": cfg.cxx_flags, "cpu_arch_flags": cfg.cpu_arch_flags}


# ----------------------------------------------------------------------------------------------
# hgemm candidates

_TENSOR_PARAM = r"\s*(?:const\s+)?(?:::\s*)?(?:torch|at)\s*::\s*Tensor\s*(?:const\s*)?&?\s*(?:[A-Za-z_]\w*)?\s*"
_ENTRY_RE = re.compile(r"(?<![\w:])void\s+([A-Za-z_]\w*)\s*\(" + ",".join([_TENSOR_PARAM] * 4) + r"\)\s*\{")
_COMMENT_OR_STRING_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)

_HGEMM_WRAPPER = """\
// Generated by rl_kernels: the candidate plus a plain-C entry point (rlk_abi.h).
#include "{candidate}"
#include <torch/extension.h>
#include <vector>
#include "rlk_abi.h"
{stream_header}{helper}
extern "C" __attribute__((visibility("default"))) int rlk_abi_version(void) {{ return RLK_ABI_VERSION; }}

extern "C" __attribute__((visibility("default"))) int rlk_hgemm(
    const rlk_tensor* a, const rlk_tensor* b, const rlk_tensor* b_col_major, const rlk_tensor* c,
    void* stream, char* err, int errlen) {{
  try {{
    {guard}
    {views}
    {entry}(ta, tb, tbc, tc);
    {join}
    return 0;
  }} catch (const std::exception& e) {{
    std::snprintf(err, static_cast<size_t>(errlen), "%s", e.what());
    return 1;
  }} catch (...) {{
    std::snprintf(err, static_cast<size_t>(errlen), "%s", "unknown C++ exception from {entry}");
    return 2;
  }}
}}
"""

# CUDA artifacts run in the caller's stream order (rlk_stream.h); a cpu artifact has no stream.
_CUDA_STREAM = {"stream_header": '#include "rlk_stream.h"\n',
                "guard": "rlk::StreamGuard guard(static_cast<cudaStream_t>(stream));", "join": "guard.join();"}
_CPU_STREAM = {"stream_header": "", "guard": "(void)stream;", "join": ""}

# Compiled so that a candidate's launches on "the default stream" go to the per-thread stream that
# rlk_stream.h orders after the caller's (capturable), not to the legacy one (never capturable).
PER_THREAD_DEFAULT_STREAM = ["--default-stream", "per-thread"]

# Against torch's own headers (the fallback when the shim lacks a header or symbol the candidate
# uses) the C views become at::Tensors over the same memory; the shim's Tensor wraps them directly.
_TORCH_VIEW_HELPER = """
static at::Tensor rlk_view(const rlk_tensor* t) {
  std::vector<int64_t> sizes(t->sizes, t->sizes + t->dim), strides(t->strides, t->strides + t->dim);
  at::Device device = t->device_type == 1 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(t->device_index))
                                          : at::Device(at::kCPU);
  return at::from_blob(t->data, sizes, strides,
                       at::TensorOptions().dtype(static_cast<at::ScalarType>(t->dtype)).device(device));
}
"""


def _hgemm_wrapper(candidate: str, entry: str, torch_headers: bool, cuda: bool) -> str:
    stream = _CUDA_STREAM if cuda else _CPU_STREAM
    if torch_headers:
        views = "at::Tensor ta = rlk_view(a), tb = rlk_view(b), tbc = rlk_view(b_col_major), tc = rlk_view(c);"
        return _HGEMM_WRAPPER.format(candidate=candidate, entry=entry, helper=_TORCH_VIEW_HELPER, views=views, **stream)
    views = "at::Tensor ta(*a), tb(*b), tbc(*b_col_major), tc(*c);"
    return _HGEMM_WRAPPER.format(candidate=candidate, entry=entry, helper="", views=views, **stream)


# What a shim build's log says when the candidate needs more of torch than the shim has.
_SHIM_TOO_SMALL = re.compile(
    r"fatal error: (?:c10|ATen|torch|caffe2)/[\w/.]+: No such file or directory"
    r"|is not a member of '(?:at|c10|torch)(?:::\w+)*'"
    r"|'(?:at|c10|torch)::[\w:]+' has not been declared"
    r"|namespace \"(?:at|c10|torch)(?:::\w+)*\" has no member"
    r"|undefined reference to `(?:at|c10|torch)::")


def _strip_comments(source: str) -> str:
    return _COMMENT_OR_STRING_RE.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", source)


def detect_hgemm_entry(source: str) -> str:
    """The unique function defined as `void NAME(Tensor, Tensor, Tensor, Tensor)`; ValueError otherwise."""
    names = sorted(set(_ENTRY_RE.findall(_strip_comments(source))))
    if not names:
        raise ValueError("no entry point: expected one function defined as `void NAME(torch::Tensor a, "
                         "torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c)`")
    if len(names) > 1:
        raise ValueError(f"ambiguous entry point: several functions take four tensors and return void: {names}")
    return names[0]


def _with_evidence(outcome: _Outcome, objects: list[Path], libraries: list[Path], allow_library: bool,
                   backend: BackendName) -> _Outcome:
    """A build whose objects import library compute or an escape, or (cuda) compile no kernel of
    their own, is refused (evidence.py); a cuda build keeps the names of the kernels it registers,
    which the evaluation's profiled call is checked against (launches.py)."""
    if not outcome.ok:
        return outcome
    found = check_artifact(objects, libraries, allow_library, require_kernel=backend == "cuda")
    if found is None:
        kernels = registered_kernels(objects) if backend == "cuda" else []
        return dataclasses.replace(outcome, kernels=kernels)
    fix = REASON_TEXT.get(found[0], ("", f"remove it — {NO_SETTING}"))[1]
    return _Outcome(False, f"{outcome.log}\nrefused after linking: {found[1]} — {fix}", found[0].value)


def _build_hgemm(source: str, backend: BackendName, cfg: BuildConfig, allow_library: bool) -> Build:
    """Against the torch shim first (seconds, no libtorch in the artifact); when that fails for a
    torch header or symbol the shim does not have, against torch's own headers and libraries (the
    artifact then needs this torch version on the timer's host).  `Build.path` says which."""
    material = {"kind": "hgemm", "backend": backend, "source": source, "allow_library": allow_library}
    try:
        entry = detect_hgemm_entry(source)
    except ValueError as exc:
        return _malformed(material, str(exc))
    candidate = "candidate.cu" if backend == "cuda" else "candidate.cpp"
    wrapper_name = "rlk_entry.cu" if backend == "cuda" else "rlk_entry.cpp"
    material.update(entry=entry, cfg=_flag_material(backend, cfg), shim=_native_dir_digest(),
                    toolchain=_toolchain(backend, cfg))
    extra_includes: list[str] = []
    if backend == "cuda":
        extra_includes = cutlass_include_dirs()
        material["cutlass"] = _cutlass_version()

    def build(path: str, wrapper: str, include_dirs: list[str], ldflags: list[str], defines: list[str]) -> Build:
        files = {candidate: source, wrapper_name: wrapper}
        # One TU: the wrapper #includes the candidate, so the entry's exact signature, static-ness or
        # default arguments never matter for linking.
        done = _cached_build(_key({**material, "path": path, "wrapper": wrapper, "defines": defines}), HGEMM_ARTIFACT, cfg,
                             lambda work, art: _with_evidence(_build_native(
                                 work, art, files, [wrapper_name], backend, cfg, include_dirs, ldflags, defines,
                                 python_symbols=path == "torch"),
                                 [work / f"{wrapper_name}.o"], [art], allow_library, backend))
        return dataclasses.replace(done, path=path)

    cuda = backend == "cuda"
    stream_flags = PER_THREAD_DEFAULT_STREAM if cuda else []
    shim = build("shim", _hgemm_wrapper(candidate, entry, torch_headers=False, cuda=cuda),
                 [str(SHIM_DIR), str(NATIVE_DIR), *extra_includes], [], stream_flags)
    if not shim.ok and backend == "cuda" and not extra_includes and _CUTLASS_INCLUDE_FAILED.search(shim.log):
        shim.log = f"{CUTLASS_MISSING}\n{shim.log}"
        return shim
    if shim.ok or not _SHIM_TOO_SMALL.search(shim.log):
        return shim
    material["torch"] = _torch_identity()
    full = build("torch", _hgemm_wrapper(candidate, entry, torch_headers=True, cuda=cuda),
                 [*_torch_include_dirs(cuda, cfg), str(NATIVE_DIR), *extra_includes],
                 _torch_link_flags(cuda, cfg), [*_torch_flags("rlk_hgemm"), *stream_flags])
    full.log = f"the torch shim lacks what this kernel uses; built against torch's headers\n{full.log}"
    return full


def _torch_include_dirs(with_cuda: bool, cfg: BuildConfig) -> list[str]:
    from torch.utils import cpp_extension

    # torch/extension.h includes Python's headers (nothing of Python is linked: the entry is plain C).
    dirs = [*cpp_extension.include_paths("cpu"), sysconfig.get_path("include", scheme="posix_prefix")]
    if with_cuda:
        dirs.append(str(_cuda_home(cfg) / "include"))
    return dirs


def _torch_link_flags(with_cuda: bool, cfg: BuildConfig) -> list[str]:
    """libtorch for a native artifact (found in the evaluating process, which has torch loaded)."""
    from torch.utils import cpp_extension

    libs = [f"-L{cpp_extension.TORCH_LIB_PATH}", "-lc10"]
    libs += ["-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda"] if with_cuda else ["-ltorch_cpu"]
    return [*libs, "-ltorch", "-ltorch_python"]


# ----------------------------------------------------------------------------------------------
# module candidates


@dataclass
class _Capture:
    calls: list[dict] | None
    error: str = ""
    reason: str | None = None


def _capture(source: str, cfg: BuildConfig) -> _Capture:
    """The candidate's load_inline calls: what an earlier capture of the same source found (kept in
    the cache dir), or what `_run_capture` finds now.  The same source is built more than once (the
    compile pool, then `rl-kernels eval` or a test on the same cache; a policy emitting the same
    kernel again), and each capture is a process that imports torch (~3 s on 2 cores).  Only calls
    are kept: a failure (a timeout, a killed top level) is found again, never served from here."""
    material = {"source": source, "capture": _capture_code_digest(), **_torch_identity()}
    path = Path(cfg.cache_dir) / "captures" / f"{_key(material)}.json"
    try:
        return _Capture(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    cap = _run_capture(source, cfg)
    if cap.calls is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cap.calls))
        tmp.replace(path)
    return cap


@functools.cache
def _capture_code_digest() -> str:
    """The recorder's own code: a capture kept by an older recorder is not reused."""
    from rl_kernels.evaluation import capture

    return hashlib.sha256(Path(capture.__file__).read_bytes()).hexdigest()


def _run_capture(source: str, cfg: BuildConfig) -> _Capture:
    """Runs the candidate's top level in a confined, GPU-less process and returns its load_inline
    calls: forked from this process's capture server where there is one (`_capture_server`), else a
    new process (which imports torch itself)."""
    scratch = Path(tempfile.mkdtemp(prefix="rlk-capture-")).resolve()
    try:
        server = _capture_server(cfg)
        res = _forked_capture(source, cfg, server, scratch) if server is not None else None
        if res is None:
            confined = ninja.Confined(_confined(cfg, scratch).argv, _capture_environment(scratch))
            res = ninja.run_in_process_group([sys.executable, "-m", "rl_kernels.evaluation.capture"], cfg.timeout_s,
                                             cwd=scratch, stdin_text=source, separate_stdout=True, confined=confined)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if res.returncode == -signal.SIGSYS:
        return _Capture(None, "candidate top-level code was killed by the seccomp filter: a forbidden system call "
                        f"(fork/exec, ptrace, a network socket, ...)\n{res.output}", Reason.SANDBOX_VIOLATION.value)
    if res.timed_out:
        return _Capture(None, f"candidate top-level code ran past {cfg.timeout_s:.0f} s\n{res.output}",
                        Reason.COMPILE_TIMEOUT.value)
    try:
        result = json.loads(res.stdout)
    except json.JSONDecodeError:
        return _Capture(None, f"capture process failed (exit {res.returncode}):\n{res.output}",
                        Reason.MALFORMED.value)
    if not result["ok"]:
        return _Capture(None, result["error"], Reason.MALFORMED.value)
    return _Capture(result["calls"])


_CAPTURE_SERVER: dict[str, Any] = {}    # "pid": the process that started it, "server", "given_up": why
_CAPTURE_LOCK = threading.Lock()


def _capture_server(cfg: BuildConfig) -> ForkServer | None:
    """This process's capture server: a fork server that imported torch once and forks each capture
    (a capture then costs a fork instead of a process importing torch, ~3 s on 2 cores).  Only
    with `capture_server` and under `isolation: namespaces` (a forked child needs its own mount
    namespace); none after one failed (captures then start new processes, as without it)."""
    if cfg.isolation != "namespaces" or not cfg.capture_server:
        return None
    with _CAPTURE_LOCK:
        if _CAPTURE_SERVER.get("pid") != os.getpid():     # none yet, or one a parent process started
            _CAPTURE_SERVER.clear()
            _CAPTURE_SERVER["pid"] = os.getpid()
        if "given_up" in _CAPTURE_SERVER:
            return None
        server = _CAPTURE_SERVER.get("server")
        if server is None or not server.alive:
            server = ForkServer(_capture_environment, ["--capture"], None, cfg.timeout_s)
            _CAPTURE_SERVER["server"] = server
            atexit.register(server.close)
        return server


def _capture_environment(home: Path) -> dict[str, str]:
    """A capture's whole environment, forked or not: a confined step's, with no GPU visible."""
    return dict(sandbox.environment(home, None), CUDA_VISIBLE_DEVICES="")


def _forked_capture(source: str, cfg: BuildConfig, server: ForkServer, scratch: Path) -> ninja.ProcResult | None:
    """The capture in a child of `server`, confined as the capture process is (its scratch dir the
    only writable place, the build cache hidden, no GPU), its stdout and stderr in the scratch
    dir; None when the server cannot fork (it is given up for this process, with a warning)."""
    (scratch / "candidate.py").write_text(source)
    conf = sandbox.confinement(scratch, (), [str(Path(cfg.cache_dir).resolve())])
    conf.aliases = [[str(scratch), str(server.home)]]
    result_r, result_w = os.pipe()
    go_r, go_w = os.pipe()
    try:
        proc = server.fork({"role": "capture", "scratch": str(scratch), "home": str(server.home),
                            "env": _capture_environment(server.home), "source_path": str(server.home / "candidate.py"),
                            "job_path": "", "flags": [], "backend": "cpu", "memory_limit_mb": cfg.memory_limit_mb,
                            "confinement": dataclasses.asdict(conf)}, result_w, go_r)
    except ForkServerError as exc:
        os.close(result_r)
        with _CAPTURE_LOCK:
            _CAPTURE_SERVER["given_up"] = str(exc)
        warnings.warn(f"rl_kernels: module captures start as new processes from now on: {exc}", RuntimeWarning,
                      stacklevel=2)
        return None
    finally:
        for fd in (result_w, go_r, go_w):
            os.close(fd)
    deadline = time.monotonic() + cfg.timeout_s
    out, timed_out = _read_until_closed(result_r, cfg.timeout_s)
    if not timed_out:
        try:        # the pipe may close early (the candidate closed it) while the process runs on
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        sandbox.signal_group(proc.pid, signal.SIGKILL)
    code = proc.wait(60)
    log = (scratch / "stderr.txt").read_text(errors="replace")[-8000:]
    return ninja.ProcResult(code, log, timed_out, out)


def _read_until_closed(fd: int, timeout_s: float) -> tuple[str, bool]:
    """Everything written to the pipe `fd` until its writer closes it (the text, False) or until
    `timeout_s` passed (what came, True); closes `fd`."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return b"".join(chunks).decode(errors="replace"), True
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks).decode(errors="replace"), False
            chunks.append(chunk)
    finally:
        os.close(fd)


def _torch_identity() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "torch_cuda": str(torch.version.cuda), "python": sys.version}


def _torch_flags(name: str) -> list[str]:
    """Macros torch's own extension builder defines (cpp_extension._write_ninja_file_to_build_library).

    No pybind11 ABI macros: torch >= 2.9 leaves the ABI to pybind11 itself (its helper returns []).
    """
    import torch

    return [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]


def _torch_includes(with_cuda: bool, cfg: BuildConfig) -> list[str]:
    from torch.utils import cpp_extension

    dirs = list(cpp_extension.include_paths("cpu"))
    dirs.append(sysconfig.get_path("include", scheme="posix_prefix"))
    if with_cuda:
        dirs.append(str(_cuda_home(cfg) / "include"))
    flags: list[str] = []
    for d in dirs:
        flags += ["-isystem", d]
    return flags


def _cuda_home(cfg: BuildConfig) -> Path:
    nvcc = shutil.which(cfg.nvcc)
    if nvcc is None:
        raise RuntimeError(f"{cfg.nvcc} not found on PATH")
    return Path(nvcc).resolve().parent.parent


def _module_cxx_flags(call: dict, backend: BackendName, cfg: BuildConfig) -> list[str]:
    """torch's C++ flags, then ours for the cpu backend (where this C++ *is* the timed kernel), then
    the candidate's, which therefore win."""
    ours = ["-O3", "-fopenmp", *cfg.cpu_arch_flags] if backend == "cpu" else []
    user_incs = [f"-I{p}" for p in call["extra_include_paths"]]
    return [*user_incs, "-fPIC", "-std=c++20", *ours, *call["extra_cflags"]]


def _module_nvcc_flags(call: dict, cfg: BuildConfig) -> list[str]:
    from torch.utils import cpp_extension

    flags = [*cpp_extension.COMMON_NVCC_FLAGS, *_gencode_flags(cfg.cuda_archs, cfg.embed_ptx), "--compiler-options", "-fPIC",
             *call["extra_cuda_cflags"]]
    if not any(f.startswith("-std=") for f in flags):
        flags.append("-std=c++20")
    return flags


_PCH_HEADER = "rlk_torch_extension_pch.h"


def _ensure_pch(flags: list[str], cfg: BuildConfig) -> Path | None:
    """Precompiled torch/extension.h for these exact flags (built once per cache dir, under a lock).

    `flags` are the translation unit's flags minus -DTORCH_EXTENSION_NAME (which torch headers never
    read), so one header serves every extension built with the same flags.  Returns the header to
    `-include`, or None when it cannot be built (the compile then parses torch headers itself:
    slower, same result).  gcc ignores a .gch whose flags differ, and -Winvalid-pch says so.
    """
    material = {"flags": flags, "cxx": _tool_identity(cfg.cxx), **_torch_identity()}
    pch_dir = Path(cfg.cache_dir) / "pch" / _key(material)[:32]
    header = pch_dir / _PCH_HEADER
    gch = pch_dir / f"{_PCH_HEADER}.gch"
    failed = pch_dir / "failed.log"
    if gch.is_file():
        return header
    if failed.is_file():
        return None
    pch_dir.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(pch_dir / "lock"), timeout=cfg.timeout_s * 3 + 600):
        if gch.is_file():
            return header
        if failed.is_file():
            return None
        header.write_text("#include <torch/extension.h>\n")
        tmp = pch_dir / f"{_PCH_HEADER}.gch.tmp{os.getpid()}"
        cmd = [cfg.cxx, *flags, "-x", "c++-header", str(header), "-o", str(tmp)]
        res = ninja.run_in_process_group(cmd, cfg.timeout_s, confined=_confined(cfg, pch_dir, _flag_dirs(flags)))
        if res.returncode != 0 or res.timed_out:
            tmp.unlink(missing_ok=True)
            if not res.timed_out:
                failed.write_text(res.output)
            return None
        os.rename(tmp, gch)
    return header


def _pch_flags(call: dict, backend: BackendName, cfg: BuildConfig, with_cuda: bool) -> list[str]:
    """Exactly the flags main.cpp is compiled with, except the per-extension name."""
    macros = [f for f in _torch_flags(call["name"]) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    return [*macros, *_torch_includes(with_cuda, cfg), *_module_cxx_flags(call, backend, cfg)]


def _module_edges(call: dict, files: dict[str, str], backend: BackendName, cfg: BuildConfig, work: Path,
                  pch: Path | None, link: bool, slim: bool) -> tuple[list[ninja.Edge], list[str]]:
    """main.cpp (the binding: torch/extension.h, precompiled when it can be) and cuda.cu (against
    the slim torch headers in `NAME/slim` when `slim`), then the link."""
    name = call["name"]
    with_cuda = "cuda.cu" in files
    common = [*_torch_flags(name), *_torch_includes(with_cuda, cfg)]
    cxx_flags = _module_cxx_flags(call, backend, cfg)
    pch_flags = ["-Winvalid-pch", "-include", str(pch)] if pch is not None else []
    edges = [ninja.Edge([f"{name}/main.o"], [f"{name}/main.cpp"],
                        [cfg.cxx, *common, *cxx_flags, *pch_flags, "-c", f"{name}/main.cpp", "-o", f"{name}/main.o"],
                        f"compile {name}/main.cpp")]
    objects = [f"{name}/main.o"]
    if with_cuda:
        user_incs = [f"-I{p}" for p in call["extra_include_paths"]]
        slim_incs = [f"-I{name}/slim"] if slim else []
        edges += _nvcc_edges([cfg.nvcc, *slim_incs, *common, *user_incs, *_module_nvcc_flags(call, cfg), "-c",
                              f"{name}/cuda.cu", "-o", f"{name}/cuda.cuda.o"], f"{name}/cuda.cu", f"{name}/cuda.cuda.o",
                             work, cfg)
        objects.append(f"{name}/cuda.cuda.o")
    if not link:
        return edges, objects
    from torch.utils import cpp_extension

    libs = [f"-L{cpp_extension.TORCH_LIB_PATH}", "-lc10"]
    libs += ["-lc10_cuda"] if with_cuda else []
    libs += ["-ltorch_cpu"] + (["-ltorch_cuda"] if with_cuda else []) + ["-ltorch", "-ltorch_python"]
    libs += [f"-L{_cuda_home(cfg) / 'lib64'}", "-lcudart"] if with_cuda else []
    omp = ["-fopenmp"] if backend == "cpu" else []
    edges.append(ninja.Edge([f"{name}.so"], objects,
                            [cfg.cxx, *objects, "-shared", *omp, *libs, *call["extra_ldflags"], "-o", f"{name}.so"],
                            f"link {name}.so"))
    return edges, [f"{name}.so"]


def _build_module_artifact(work: Path, artifact: Path, calls: list[dict], backend: BackendName,
                           cfg: BuildConfig, allow_library: bool, slim: bool) -> _Outcome:
    import torch

    can_link = backend == "cpu" or torch.version.cuda is not None
    edges: list[ninja.Edge] = []
    manifest: dict[str, dict[str, str]] = {}
    log_prefix = ""
    pch_dirs: set[str] = set()
    for call in calls:
        files = _generated_files(call)
        (work / call["name"]).mkdir()
        for fname, text in files.items():
            (work / call["name"] / fname).write_text(text)
        with_cuda = "cuda.cu" in files
        pch = _ensure_pch(_pch_flags(call, backend, cfg, with_cuda), cfg)
        if pch is None:
            log_prefix += f"note: no precompiled header for {call['name']}; compiling torch headers in full\n"
        else:
            pch_dirs.add(str(pch.parent))
        if slim and with_cuda:
            slim_torch.write_headers(work / call["name"] / "slim", call["cuda_sources"], _torch_include_dirs(False, cfg))
        ext_edges, _ = _module_edges(call, files, backend, cfg, work, pch, link=can_link, slim=slim and with_cuda)
        edges += ext_edges
        manifest[call["name"]] = {"file": f"{call['name']}.so", "sha256": sources_digest(files)}
    readable = sorted({d for e in edges for d in _flag_dirs(e.command)} | pch_dirs)
    confined = _confined(cfg, work.parent, readable)
    outcome = _ninja_outcome(ninja.run_ninja(work, edges, cfg.timeout_s, confined=confined), cfg)
    outcome.log = log_prefix + outcome.log
    if not outcome.ok:
        return outcome
    if not can_link:
        return _Outcome(False, outcome.log + f"\nCUDA sources compiled, but cannot be linked: the installed torch "
                        f"{torch.__version__} is a CPU-only build (no libc10_cuda / libtorch_cuda). Build CUDA "
                        "modules where torch has CUDA.", Reason.COMPILE_ERROR.value)
    objects = [work / edge.outputs[0] for edge in edges if edge.outputs[0].endswith(".o")]
    outcome = _with_evidence(outcome, objects, [work / e["file"] for e in manifest.values()], allow_library, backend)
    if not outcome.ok:
        return outcome
    with zipfile.ZipFile(artifact, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(MANIFEST, json.dumps({"extensions": manifest}, indent=1, sort_keys=True))
        for name, entry in manifest.items():
            zf.write(work / entry["file"], entry["file"])
    return outcome


def _generated_files(call: dict) -> dict[str, str]:
    return generate_inline_sources(call["cpp_sources"], call["cuda_sources"], call["functions"],
                                   call["with_pytorch_error_handling"], call["no_implicit_headers"])


def _build_module(source: str, backend: BackendName, cfg: BuildConfig, allow_library: bool) -> Build:
    t0 = time.monotonic()
    cap = _capture(source, cfg)
    material: dict = {"kind": "module", "backend": backend, "source": source}
    if cap.calls is None:
        return Build(key=_key(material), ok=False, log=_truncate(cap.error, cfg.log_max_chars),
                     seconds=time.monotonic() - t0, reason=cap.reason)
    calls: dict[str, dict] = {}
    checked = set(extract_native_sources(source))
    for call in cap.calls:
        unseen = [t for t in call["cpp_sources"] + call["cuda_sources"] if t not in checked]
        if unseen:
            return Build(key=_key(material), ok=False, seconds=time.monotonic() - t0, reason=Reason.DYNAMIC_CODE.value,
                         log=f"load_inline {call['name']!r} was given sources the static gate never saw "
                             f"(built at run time): {unseen[0][:200]!r} — the build accepts only sources the gate "
                             "scanned; write them as literals or names assigned a literal once — no setting "
                             "accepts it")
        refused = check_flags(call["extra_cflags"], call["extra_cuda_cflags"], call["extra_ldflags"],
                              call["extra_include_paths"])
        if refused is not None:
            return Build(key=_key(material), ok=False,
                         log=f"load_inline {call['name']!r}: {refused} — flags are limited to an allow list "
                             "(rl_kernels/evaluation/flags.py); drop the flag — no setting accepts it",
                         seconds=time.monotonic() - t0, reason=Reason.FORBIDDEN_FLAG.value)
        if call["name"] in calls and calls[call["name"]] != call:
            return _malformed(material, f"load_inline called twice with name {call['name']!r} and different "
                              "sources — one name builds one extension; give each call its own name")
        calls[call["name"]] = call
    ordered = [calls[n] for n in sorted(calls)]
    material = {"kind": "module", "backend": backend, "calls": ordered, "cfg": _flag_material(backend, cfg),
                "toolchain": _toolchain(backend, cfg), "allow_library": allow_library, **_torch_identity()}
    if backend == "cpu" and any(c["cuda_sources"] or c["with_cuda"] for c in ordered):
        return Build(key=_key(material), ok=False, log="the cpu backend builds C++ only, but load_inline was given "
                     "CUDA (cuda_sources or with_cuda=True) — evaluate with eval.backend=cuda, or write a C++ "
                     "loop in cpp_sources", seconds=time.monotonic() - t0,
                     reason=Reason.COMPILE_ERROR.value)

    def build(path: str) -> Build:
        slim = path == "slim"
        key = _key({**material, "path": path, "slim": slim_torch.digest()} if slim else material)
        done = _cached_build(key, MODULE_ARTIFACT, cfg, lambda work, art: _build_module_artifact(
            work, art, ordered, backend, cfg, allow_library, slim))
        return dataclasses.replace(done, path=path)

    cuda_sources = [text for c in ordered for text in c["cuda_sources"]]
    if backend == "cuda" and cfg.slim_torch_headers and cuda_sources and slim_torch.suits(cuda_sources):
        result = build("slim")
        if not result.ok and slim_torch.TOO_SLIM.search(result.log):
            result = build("torch")
            result.log = f"the slim torch headers lack what this candidate uses; built against torch's headers\n{result.log}"
    else:
        result = build("torch")
    if not result.cached:
        result.seconds = time.monotonic() - t0
    return result


# ----------------------------------------------------------------------------------------------
# public entry point


def gated_build(task: Task, source: str, cfg: EvalConfig) -> Build:
    """The compile pool's job: the static gate, then the build (a rejected candidate is never compiled).

    A gate rejection comes back as a failed Build whose reason is the gate's.  With
    `eval.quiet_host` the build is one unit of shared work: it waits while a timer holds the host.
    """
    allow = task.allow_torch_ops or cfg.allow_torch_rewrites
    verdict = static_check(task, source, cfg.backend, allow_torch_ops=allow)
    if verdict.reason is not None:
        return Build(key="", ok=False, log=verdict.detail, reason=verdict.reason.value)
    with SharedUse(host_share(cfg)):
        return build_candidate(task, source, cfg.backend, cfg.build, allow)


def build_many(items: list[tuple[Task, str]], cfg: EvalConfig, jobs: int,
               on_done: Callable[[], None] = lambda: None) -> list[Build]:
    """`gated_build` of every (task, source) in a pool of `jobs` processes, in the order given.

    The pool's processes are spawned (no CUDA or thread state inherited); `on_done` is called as each
    build finishes (a progress bar).  Later evaluations of the same sources hit the cache.
    """
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(gated_build, task, source, cfg) for task, source in items]
        for future in as_completed(futures):
            future.result()
            on_done()
        return [f.result() for f in futures]


def build_candidate(task: Task, source: str, backend: BackendName, cfg: BuildConfig,
                    allow_torch_ops: bool = False) -> Build:
    """Compiles one candidate for `task` into a shippable artifact (cached; never needs a GPU).

    Unless the task (or `allow_torch_ops`) allows torch-level rewrites, an artifact that imports
    library compute (BLAS, cuBLAS, cuDNN, ATen operators) is refused `no_custom_kernel`.
    """
    allow_library = allow_torch_ops or task.allow_torch_ops
    if task.kind == "hgemm":
        return _build_hgemm(source, backend, cfg, allow_library)
    if task.kind == "module":
        return _build_module(source, backend, cfg, allow_library)
    raise ValueError(f"unknown task kind {task.kind!r}")
