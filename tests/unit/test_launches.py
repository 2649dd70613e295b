"""Runtime launch evidence: kernel names read from nvcc's objects, and the verdict on a profiled call."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from rl_kernels.evaluation.launches import Launch, judge_launches, own_kernel_keys, registered_kernels
from rl_kernels.evaluation.reasons import Rejected

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

KERNELS = r"""
namespace ns { template <typename T> struct P { T* p; int n; }; }
template <typename T> __global__ void scale(ns::P<T> p) { if (threadIdx.x < p.n) p.p[threadIdx.x] *= 2; }
__global__ void plain(float* x) { x[0] = 1; }
namespace { __global__ void hidden(int* x) { x[0] = 1; } }
extern "C" __global__ void c_named(float* x) { x[0] = 2; }
void host_only(float* x) { x[1] = 3; }
void launch(float* x, int* y) {
  scale<float><<<1, 32>>>(ns::P<float>{x, 4});
  plain<<<1, 1>>>(x);
  hidden<<<1, 1>>>(y);
  c_named<<<1, 1>>>(x);
}
"""


@pytest.fixture(scope="module")
def kernel_object(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("launches")
    (work / "k.cu").write_text(KERNELS)
    # -O3 as the real builds: the host compiler may inline the launch stubs (only their statics stay)
    subprocess.run(["nvcc", "-c", "-O3", "-Xcompiler", "-fPIC", "-arch=sm_80", "k.cu", "-o", "k.o"], cwd=work,
                   check=True, capture_output=True, timeout=300)
    return work / "k.o"


@needs_nvcc
def test_every_kernel_of_an_object_is_named_as_the_device_knows_it(kernel_object: Path) -> None:
    names = registered_kernels([kernel_object])
    keys = own_kernel_keys(names, torch._C._demangle)
    for device_name in ("void scale<float>(ns::P<float>)", "plain(float*)", "(anonymous namespace)::hidden(int*)",
                        "c_named"):   # an extern "C" kernel keeps its plain name on the device
        assert "".join(device_name.split()) in keys, (device_name, names)
    assert not any("host_only" in torch._C._demangle(n) for n in names)   # host code is not a kernel


def test_a_call_of_own_kernels_passes_with_its_figures() -> None:
    own = own_kernel_keys(["_Z5plainPf"], torch._C._demangle)
    figures = judge_launches([Launch("plain(float*)", 9.0), Launch("void at::native::fill_kernel<float>()", 1.0)],
                             own, max_foreign_share=0.5)
    assert figures["own_kernels"] == 1 and figures["foreign_kernels"] == 1
    assert figures["foreign_share"] == pytest.approx(0.1)


def test_a_call_that_runs_none_of_its_own_kernels_is_refused() -> None:
    own = own_kernel_keys(["_Z5plainPf"], torch._C._demangle)
    with pytest.raises(Rejected) as no_launch:
        judge_launches([], own, max_foreign_share=0.5)
    assert no_launch.value.reason.value == "no_custom_kernel"
    with pytest.raises(Rejected) as library:
        judge_launches([Launch("sm90_xmma_gemm_f16f16_f32", 40.0)], own, max_foreign_share=0.5)
    assert library.value.reason.value == "no_custom_kernel" and "sm90_xmma_gemm" in library.value.detail


def test_a_token_kernel_fronting_for_foreign_work_is_refused() -> None:
    own = own_kernel_keys(["_Z5plainPf"], torch._C._demangle)
    launches = [Launch("plain(float*)", 1.0), Launch("ampere_fp16_s1688gemm_fp16_256x128", 30.0)]
    with pytest.raises(Rejected) as refused:
        judge_launches(launches, own, max_foreign_share=0.5)
    assert "97% of a profiled call's device time" in refused.value.detail
    assert judge_launches(launches, own, max_foreign_share=1.0)["foreign_share"] == pytest.approx(30 / 31)


def test_a_kernel_whose_stub_was_inlined_is_found_by_the_stub_statics(tmp_path: Path) -> None:
    """With -O3 the host compiler may inline a template kernel's launch stub (CUTLASS's do): only
    the stub's static locals and their guard name the kernel then."""
    stub = "_ZZL37__device_stub__Z5scaleIfEvN2ns1PIT_EERN2ns1PIfEE"
    (tmp_path / "statics.cpp").write_text(f'int f asm("{stub}E3__f") = 1;\nint g asm("_ZGVZL37__device_stub__'
                                          f'Z5scaleIfEvN2ns1PIT_EERN2ns1PIfEE5__tmp") = 2;\n')
    subprocess.run(["c++", "-c", "statics.cpp", "-o", "statics.o"], cwd=tmp_path, check=True, timeout=120)
    names = registered_kernels([tmp_path / "statics.o"])
    assert "_Z5scaleIfEvN2ns1PIT_EE" in names
    assert torch._C._demangle("_Z5scaleIfEvN2ns1PIT_EE") == "void scale<float>(ns::P<float>)"
