"""The slim torch headers of a module's CUDA file: which operators they declare, where they stand in
for torch's headers, and which compile errors send the build back to torch's own headers (real nvcc
messages)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from rl_kernels.evaluation import slim_torch

ROOTS = list(cpp_extension.include_paths("cpu"))
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
# torch's cpu wheels ship c10/cuda's headers without the generated macro header they include
needs_cuda_headers = pytest.mark.skipif(
    not any((Path(r) / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").is_file() for r in ROOTS),
    reason="this torch has no CUDA headers")

KERNEL_FILE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void scale(const float* x, float* y, float a, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
torch::Tensor run(torch::Tensor x, double a) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be float32 on the GPU");
  auto y = torch::empty_like(x);
  auto z = at::zeros({1}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "scale", [&] {});
  scale<<<(x.numel() + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), (float)a, x.numel());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  TORCH_CHECK(z.sum().item<float>() == 0.0f);
  return y;
}
"""


def test_the_operators_a_file_calls_are_declared_and_nothing_else() -> None:
    source = "auto y = torch::empty_like(x); auto z = at::zeros ({1}); torch::Tensor t; at::kFloat; torch::no_such_op(x);"
    assert slim_torch.operators_named([source], ROOTS) == ["empty_like", "zeros"]


def test_a_file_that_is_its_own_python_module_goes_to_torchs_headers() -> None:
    assert slim_torch.suits([KERNEL_FILE])
    assert not slim_torch.suits([KERNEL_FILE + "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run); }\n"])
    assert not slim_torch.suits(["py::object f();"])


def test_every_header_a_kernel_file_includes_for_torch_is_the_slim_one(tmp_path: Path) -> None:
    slim_torch.write_headers(tmp_path, [KERNEL_FILE], ROOTS)
    for name in slim_torch.SHADOWED:
        text = (tmp_path / name).read_text()
        included = (tmp_path / name).parent / text.split('"')[1]
        assert included.resolve() == (tmp_path / "rlk_slim_torch.h").resolve()
    ops = (tmp_path / "rlk_slim_ops.h").read_text()
    assert "<ATen/ops/empty_like.h>" in ops and "<ATen/ops/zeros.h>" in ops


@needs_nvcc
@needs_cuda_headers
def test_a_kernel_file_compiles_against_the_slim_headers(tmp_path: Path) -> None:
    slim_torch.write_headers(tmp_path / "slim", [KERNEL_FILE], ROOTS)
    (tmp_path / "k.cu").write_text(KERNEL_FILE)
    includes = [f for r in ROOTS for f in ("-isystem", r)]
    res = subprocess.run(["nvcc", f"-I{tmp_path / 'slim'}", *includes, "-std=c++20", "-c", "k.cu", "-o", "k.o"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]


def _nvcc_errors(tmp_path: Path, body: str) -> str:
    (tmp_path / "e.cu").write_text(body)
    res = subprocess.run(["nvcc", "-std=c++20", "-c", "e.cu", "-o", "e.o"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0
    return res.stdout + res.stderr


@needs_nvcc
@pytest.mark.parametrize("body", [
    "namespace at { namespace cuda {} } void f() { at::cuda::getCurrentDeviceProperties(); }",
    "namespace torch {} void f() { torch::relu(1); }",
    "void f() { py::object o; }",
    "#include <ATen/native/SomethingElse.h>\n",
    "namespace at { struct Tensor {}; } at::Tensor f(at::Tensor a, at::Tensor b) { return a + b; }",
])
def test_a_file_that_needs_more_of_torch_is_built_again_against_its_headers(tmp_path: Path, body: str) -> None:
    log = _nvcc_errors(tmp_path, body)
    assert slim_torch.TOO_SLIM.search(log), log


@needs_nvcc
@pytest.mark.parametrize("body", [
    "void f() { int x = undefined_name + 1; }",
    "__global__ void k(float* y) { y[threadIdx.x] = missing_helper(y); }",
    "void f() { float* p = 1.5; }",
])
def test_a_candidates_own_compile_error_is_not_built_twice(tmp_path: Path, body: str) -> None:
    log = _nvcc_errors(tmp_path, body)
    assert not slim_torch.TOO_SLIM.search(log), log
