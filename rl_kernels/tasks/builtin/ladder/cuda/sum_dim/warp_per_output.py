import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <vector>

// x viewed as (outer, n, inner). One warp per output: lane l sums rows l, l+32, ...
// then a shuffle tree. Lanes are inner*4 bytes apart, so loads coalesce only when inner == 1.
__global__ void sum_warp_kernel(const float* __restrict__ x, float* __restrict__ y,
                                int64_t total, int64_t n, int64_t inner) {
    const int lane = threadIdx.x & 31;
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t idx = warp; idx < total; idx += nwarps) {  // warp-uniform loop
        const int64_t o = idx / inner, i = idx % inner;
        const float* p = x + o * n * inner + i;
        float acc = 0.0f;
        for (int64_t r = lane; r < n; r += 32) acc += p[r * inner];
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) y[idx] = acc;
    }
}

torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t nd = x.dim();
    const int64_t d = dim < 0 ? dim + nd : dim;
    TORCH_CHECK(d >= 0 && d < nd, "dim out of range");
    int64_t outer = 1, inner = 1;
    std::vector<int64_t> out_sizes;
    for (int64_t i = 0; i < nd; ++i) {
        if (i < d) outer *= x.size(i);
        if (i > d) inner *= x.size(i);
        if (i != d) out_sizes.push_back(x.size(i));
    }
    auto y = torch::empty(out_sizes, x.options());
    const int64_t total = outer * inner;
    if (total == 0) return y;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((total + 7) / 8, 65535);  // 8 warps per block
    sum_warp_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), total, x.size(d), inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim);"

ext = load_inline(
    name="rlk_builtin_sum_dim_cuda_warp_per_output",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["sum_dim_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.sum_dim_forward(x.contiguous(), self.dim)
