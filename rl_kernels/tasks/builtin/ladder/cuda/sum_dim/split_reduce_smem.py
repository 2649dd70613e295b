import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <vector>

constexpr int TX = 32;  // consecutive inner columns per block (coalesced)
constexpr int TY = 16;  // power of two: slices of the reduced dim, summed in shared memory

// x viewed as (outer, n, inner). Block = (outer index, tile of 32 inner columns);
// thread (tx, ty) sums rows ty, ty+16, ... of its column, then a tree over ty.
__global__ void sum_split_kernel(const float* __restrict__ x, float* __restrict__ y,
                                 int64_t n, int64_t inner, int64_t tiles) {
    __shared__ float part[TY][TX + 1];
    const int64_t o = blockIdx.x / tiles;
    const int64_t i = (blockIdx.x % tiles) * TX + threadIdx.x;
    float acc = 0.0f;
    if (i < inner) {
        const float* p = x + o * n * inner + i;
        for (int64_t r = threadIdx.y; r < n; r += TY) acc += p[r * inner];
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int s = TY / 2; s > 0; s >>= 1) {
        if (threadIdx.y < s) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && i < inner) y[o * inner + i] = part[0][threadIdx.x];
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
    const int64_t tiles = (inner + TX - 1) / TX;
    TORCH_CHECK(outer * tiles < 2147483647LL, "too many output tiles");
    sum_split_kernel<<<(unsigned)(outer * tiles), dim3(TX, TY), 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(d), inner, tiles);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim);"

ext = load_inline(
    name="rlk_builtin_sum_dim_cuda_split_reduce_smem",
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
