"""Build step: entry detection, the content-addressed cache, hgemm builds (cpu run, cuda compile-only)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from rl_kernels.config import BuildConfig
from rl_kernels.evaluation.artifact import load_hgemm_entry, load_native_library, unpack_artifact
from rl_kernels.evaluation.build import (_gencode_flags, build_candidate, build_native_library, detect_hgemm_entry,
                                         runnable_arch)
from rl_kernels.evaluation.guards import static_check
from rl_kernels.types import HgemmSpec, Task

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
SRC = CANDIDATES / "build"
TASK = Task(id="hgemm_64", kind="hgemm", hgemm=HgemmSpec(64, 64, 64, "fp32"))
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


def _cfg(tmp_path: Path, **kw) -> BuildConfig:
    return BuildConfig(cache_dir=tmp_path / "cache", **kw)


def _operands(m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    a = torch.randn(m, k).half()
    b = torch.randn(k, n).half()
    b_col_major = b.t().contiguous().t()  # CUDA-L2's as_col_major: shape (K, N), stored NxK
    c = torch.full((m, n), float("nan")).half()
    return a, b, b_col_major, c


# ---------------------------------------------------------------- entry detection


def test_entry_detection_cuda_l2_layout() -> None:
    source = (SRC / "cuda_l2_layout.cu").read_text()
    assert detect_hgemm_entry(source) == "cuda_l2_like_fp32"


@pytest.mark.parametrize("params", [
    "torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c",
    "at::Tensor a,at::Tensor b,at::Tensor bc,at::Tensor c",
    "const torch::Tensor& a,\n    const torch::Tensor &b,\n    const torch::Tensor& b_col_major,\n    const at::Tensor& c",
    "torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor",
])
def test_entry_detection_whitespace_and_param_styles(params: str) -> None:
    source = f"#include <torch/extension.h>\nstatic int helper(int x) {{ return x; }}\nvoid  my_entry (\n{params}) {{ }}\n"
    assert detect_hgemm_entry(source) == "my_entry"


def test_entry_detection_ignores_declarations_and_comments() -> None:
    source = (
        "void fwd(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c);\n"
        "// void old(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c) {}\n"
        "/* void older(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c) {} */\n"
        "void fwd(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c) {}\n"
    )
    assert detect_hgemm_entry(source) == "fwd"


@pytest.mark.parametrize("source, message", [
    ("void f(torch::Tensor a, torch::Tensor b, torch::Tensor c) {}", "no entry point"),
    ("int f(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c) { return 0; }", "no entry point"),
    ("void f(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c) {}\n"
     "void g(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c) {}", "ambiguous"),
])
def test_entry_detection_rejects_malformed(source: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        detect_hgemm_entry(source)


def test_malformed_candidate_is_not_compiled(tmp_path: Path) -> None:
    build = build_candidate(TASK, "int main() { return 0; }", "cpu", _cfg(tmp_path))
    assert not build.ok and build.reason == "malformed"
    assert "no entry point" in build.log
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------- cpu hgemm: build, run, cache


def test_cpu_hgemm_builds_and_computes_the_product(tmp_path: Path) -> None:
    build = build_candidate(TASK, (SRC / "hgemm_cpu.cpp").read_text(), "cpu", _cfg(tmp_path))
    assert build.ok, build.log
    assert build.artifact_name == "hgemm.so" and build.artifact and not build.cached and build.reason is None
    assert "link hgemm.so" in build.log  # the log is kept on success too
    # round trip: the bytes alone, unpacked elsewhere, are a working artifact
    so = unpack_artifact(build.artifact, build.artifact_name, tmp_path / "elsewhere")
    hgemm = load_hgemm_entry(so)
    a, b, b_col_major, c = _operands(37, 45, 70)
    hgemm(a, b, b_col_major, c)
    ref = a.float() @ b.float()
    assert torch.allclose(c.float(), ref, atol=2e-2, rtol=1e-2)


def test_cpu_hgemm_errors_become_runtime_errors(tmp_path: Path) -> None:
    build = build_candidate(TASK, (SRC / "hgemm_cpu.cpp").read_text(), "cpu", _cfg(tmp_path))
    hgemm = load_hgemm_entry(unpack_artifact(build.artifact, build.artifact_name, tmp_path / "x"))
    a, b, b_col_major, c = _operands(8, 8, 8)
    with pytest.raises(RuntimeError, match="values must be torch::kHalf"):
        hgemm(a.float(), b, b_col_major, c)
    with pytest.raises(RuntimeError, match=r"c has shape \[8, 4\], expected \[8, 8\]"):
        hgemm(a, b, b_col_major, c[:, :4].contiguous())


def test_cache_hit_and_key_sensitivity(tmp_path: Path) -> None:
    source = (SRC / "hgemm_cpu.cpp").read_text()
    cfg = _cfg(tmp_path)
    first = build_candidate(TASK, source, "cpu", cfg)
    again = build_candidate(TASK, source, "cpu", cfg)
    assert first.ok and not first.cached
    assert again.cached and again.key == first.key and again.artifact == first.artifact
    assert again.log == first.log
    other_source = build_candidate(TASK, source + "\n// different\n", "cpu", cfg)
    assert other_source.key != first.key and not other_source.cached
    other_flags = build_candidate(TASK, source, "cpu", _cfg(tmp_path, cxx_flags=["-O2", "-std=c++17", "-fPIC"]))
    assert other_flags.key != first.key and not other_flags.cached
    cached_dir = tmp_path / "cache" / "builds" / first.key[:2] / first.key
    assert sorted(p.name for p in cached_dir.iterdir()) == ["build.log", "hgemm.so", "meta.json"]


def test_key_depends_on_cuda_archs_and_nvcc_flags(tmp_path: Path) -> None:
    # A missing nvcc fails fast, and failures are cached under their key: enough to compare keys.
    source = (SRC / "hgemm_cuda.cu").read_text()
    base = dict(nvcc=str(tmp_path / "no-nvcc"))
    k80 = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"], **base))
    k90 = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_90a"], **base))
    kflags = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"], nvcc_flags=["-O2"], **base))
    assert not k80.ok and k80.reason == "compile_error"
    assert len({k80.key, k90.key, kflags.key}) == 3
    assert build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"], **base)).cached


def test_compile_error_returns_log_and_is_cached(tmp_path: Path) -> None:
    source = (SRC / "compile_error.cpp").read_text()
    build = build_candidate(TASK, source, "cpu", _cfg(tmp_path))
    assert not build.ok and build.reason == "compile_error" and build.artifact is None
    assert "this_symbol_does_not_exist" in build.log
    again = build_candidate(TASK, source, "cpu", _cfg(tmp_path))
    assert again.cached and again.reason == "compile_error" and again.log == build.log


def test_an_ordinary_compile_error_stays_on_the_shim() -> None:
    """Only a torch header or symbol the shim lacks sends a build to torch's own headers."""
    from rl_kernels.evaluation.build import _SHIM_TOO_SMALL

    needs_torch = [
        "candidate.cu:3:10: fatal error: c10/cuda/CUDAGuard.h: No such file or directory",
        "candidate.cpp:9:3: error: 'irange' is not a member of 'c10'",
        "candidate.cpp:9:3: error: 'at::parallel_for' has not been declared",
        'candidate.cu(12): error: namespace "c10::cuda" has no member "CUDAGuard"',
        "rlk_entry.cpp:(.text+0x1a): undefined reference to `at::Tensor::contiguous() const'",
    ]
    own_fault = [
        "candidate.cpp:4:1: error: 'this_symbol_does_not_exist' was not declared in this scope",
        "candidate.cpp:7:12: error: expected ';' before '}' token",
        "candidate.cpp:2:10: fatal error: mylib.h: No such file or directory",
    ]
    assert all(_SHIM_TOO_SMALL.search(line) for line in needs_torch)
    assert not any(_SHIM_TOO_SMALL.search(line) for line in own_fault)


def test_log_is_truncated_to_the_configured_size(tmp_path: Path) -> None:
    build = build_candidate(TASK, (SRC / "compile_error.cpp").read_text(), "cpu", _cfg(tmp_path, log_max_chars=300))
    assert len(build.log) < 400 and "characters cut" in build.log


def test_timeout_is_reported_and_not_cached(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, timeout_s=0.05)
    source = (SRC / "hgemm_cpu.cpp").read_text()
    build = build_candidate(TASK, source, "cpu", cfg)
    assert not build.ok and build.reason == "compile_timeout"
    assert "timed out" in build.log
    assert not build_candidate(TASK, source, "cpu", cfg).cached


# ---------------------------------------------------------------- cuda (compile only, no GPU needed)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_hgemm_compiles(tmp_path: Path, arch: str) -> None:
    build = build_candidate(TASK, (SRC / "hgemm_cuda.cu").read_text(), "cuda", _cfg(tmp_path, cuda_archs=[arch]))
    assert build.ok, build.log
    assert build.artifact[:4] == b"\x7fELF"


@needs_nvcc
def test_cuda_hgemm_links_cudart_statically(tmp_path: Path) -> None:
    build = build_candidate(TASK, (SRC / "hgemm_cuda.cu").read_text(), "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert build.ok, build.log
    assert b"libcudart.so" not in build.artifact  # self-contained: only the driver is needed on the GPU host


@needs_nvcc
def test_a_cuda_hgemm_runs_in_its_callers_stream_order(tmp_path: Path) -> None:
    """Default-stream launches go to the per-thread stream (rlk_stream.h joins it to the caller's),
    and the artifact says which ABI it speaks."""
    build = build_candidate(TASK, (SRC / "hgemm_cuda.cu").read_text(), "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert build.ok, build.log
    so = str(unpack_artifact(build.artifact, build.artifact_name, tmp_path / "x"))
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so], capture_output=True, text=True, check=True).stdout
    launches = re.findall(r"call\s+\w+ <(__cudaLaunchKernel\w*)>", code)
    assert launches and set(launches) == {"__cudaLaunchKernel_ptsz"}   # `<<<...>>>` on the per-thread stream
    symbols = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True, check=True).stdout
    assert " T rlk_hgemm\n" in symbols and " T rlk_abi_version\n" in symbols


def test_an_artifact_of_another_abi_is_refused_with_a_rebuild_hint(tmp_path: Path) -> None:
    """An artifact built before the stream argument (or of another version) would read its arguments
    at the wrong places: refused when loaded, naming what to do."""
    old = tmp_path / "old.c"
    old.write_text("int rlk_hgemm(void* a, void* b, void* bc, void* c, char* err, int n) { return 0; }\n")
    other = tmp_path / "other.c"
    other.write_text(old.read_text() + "int rlk_abi_version(void) { return 1; }\n")
    for src in (old, other):
        subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(src.with_suffix(".so"))], check=True)
    with pytest.raises(RuntimeError, match="does not export rlk_hgemm and rlk_abi_version .*build or export it again"):
        load_hgemm_entry(old.with_suffix(".so"))
    with pytest.raises(RuntimeError, match="built for hgemm ABI 1, this runtime calls ABI 2: build or export it again"):
        load_hgemm_entry(other.with_suffix(".so"))


@needs_nvcc
def test_a_cuda_build_keeps_the_kernels_it_registers(tmp_path: Path) -> None:
    """The names the evaluation's profiled call is checked against, served again from the cache."""
    source = (SRC / "hgemm_cuda.cu").read_text()
    build = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert build.ok, build.log
    assert build.kernels and all(k.startswith("_Z") or k.isidentifier() for k in build.kernels)
    assert any("hgemm" in torch._C._demangle(k) for k in build.kernels), build.kernels
    again = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert again.cached and again.kernels == build.kernels


@needs_nvcc
def test_a_kernel_that_is_never_launched_still_builds(tmp_path: Path) -> None:
    """Registering a kernel is all the build can see: the run's launch evidence refuses this one."""
    source = (CANDIDATES / "hacks" / "trust" / "idle_kernel_cuda.cu").read_text()
    assert static_check(TASK, source, "cuda").ok
    build = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert build.ok, build.log
    assert [torch._C._demangle(k) for k in build.kernels if k.startswith("_Z")] == [
        "idle_tile_kernel(__half const*, __half const*, __half*, int, int, int)"]


@needs_nvcc
def test_cute_include_builds(tmp_path: Path) -> None:
    build = build_candidate(TASK, (SRC / "cute_include.cu").read_text(), "cuda", _cfg(tmp_path, cuda_archs=["sm_90a"]))
    assert build.ok, build.log


@needs_nvcc
@pytest.mark.slow
def test_cuda_l2_layout_builds_unchanged(tmp_path: Path) -> None:
    build = build_candidate(TASK, (SRC / "cuda_l2_layout.cu").read_text(), "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert build.ok, build.log


@needs_nvcc
@pytest.mark.slow
def test_cutlass_device_api_kernel_builds(tmp_path: Path) -> None:
    """No __global__ or <<<>>> in the text: the gate accepts CUTLASS's device API, the build's
    evidence finds the instantiated kernel registered by the object."""
    source = (CANDIDATES / "hgemm" / "cutlass_device_api.cu").read_text()
    assert "__global__" not in source and "<<<" not in source
    assert static_check(TASK, source, "cuda").ok
    build = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert build.ok, build.log
    assert any(k.startswith("_ZN7cutlass") for k in build.kernels), build.kernels   # its own, though CUTLASS's


@needs_nvcc
def test_a_cuda_build_without_a_kernel_of_its_own_is_refused(tmp_path: Path) -> None:
    source = (CANDIDATES / "hacks" / "trust" / "cutlass_facade_cuda.cu").read_text()
    assert static_check(TASK, source, "cuda").ok   # the CUTLASS name satisfies the spelling check
    build = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_80"]))
    assert not build.ok and build.reason == "no_custom_kernel"
    assert "registers no CUDA kernel" in build.log


@pytest.mark.parametrize("archs, ptx, capability, runs", [
    (["sm_90a"], False, (9, 0), "sm_90a"),
    (["sm_80"], False, (9, 0), None),                      # CUDA-L2's A100 build on an H200: no image
    (["sm_80"], True, (9, 0), "compute_80 (PTX)"),         # ... unless PTX is embedded
    (["sm_80"], False, (8, 6), "sm_80"),                   # same major, newer minor: SASS runs
    (["sm_86"], False, (8, 0), None),                      # older minor: it does not
    (["sm_90a"], True, (10, 0), None),                     # arch-specific PTX never runs elsewhere
    (["sm_80", "sm_90a"], False, (9, 0), "sm_90a"),
])
def test_which_arch_a_device_can_run(archs: list[str], ptx: bool, capability: tuple[int, int],
                                     runs: str | None) -> None:
    assert runnable_arch(archs, ptx, capability) == runs


def test_embedded_ptx_is_for_the_newest_arch() -> None:
    assert _gencode_flags(["sm_80", "sm_90a"], embed_ptx=True)[-2:] == ["-gencode", "arch=compute_90a,code=compute_90a"]
    assert "compute_80,code=compute_80" not in " ".join(_gencode_flags(["sm_80"], embed_ptx=False))


# ---------------------------------------------------------------- generic native libraries


def test_native_library_builds_and_loads(tmp_path: Path) -> None:
    sources = {
        "add.h": "#pragma once\nint add(int a, int b);\n",
        "add.cpp": '#include "add.h"\nint add(int a, int b) { return a + b; }\n',
        "api.cpp": '#include "add.h"\nextern "C" int api_add3(int a, int b, int c) { return add(add(a, b), c); }\n',
    }
    build = build_native_library("tiny", sources, "cpu", _cfg(tmp_path))
    assert build.ok, build.log
    assert build.artifact_name == "tiny.so"
    lib = load_native_library(unpack_artifact(build.artifact, build.artifact_name, tmp_path / "lib"))
    assert lib.api_add3(1, 2, 3) == 6


def test_native_library_rejects_path_names(tmp_path: Path) -> None:
    build = build_native_library("bad", {"../x.cpp": "int x;"}, "cpu", _cfg(tmp_path))
    assert not build.ok and build.reason == "malformed"


@needs_nvcc
def test_a_cutlass_kernel_without_the_cutlass_wheel_says_what_to_install(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import rl_kernels.evaluation.build as build_module

    monkeypatch.setattr(build_module, "cutlass_include_dirs", lambda: [])
    source = ("#include <cutlass/cutlass.h>\n#include <torch/extension.h>\n"
              "__global__ void k(float* c) { c[0] = 1.0f; }\n"
              "void gemm(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {\n"
              "  k<<<1, 1>>>(reinterpret_cast<float*>(c.data_ptr()));\n}\n")
    build = build_candidate(TASK, source, "cuda", _cfg(tmp_path, cuda_archs=["sm_90a"]))
    assert not build.ok and build.reason == "compile_error"
    assert build.log.startswith(build_module.CUTLASS_MISSING) and build.path == "shim"
