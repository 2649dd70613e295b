import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <vector>

constexpr int THREADS = 256;  // power of two: the tree reduction below halves it

// x viewed as (outer, n, inner). One block per output; threads stride over the reduced dim,
// then a shared-memory tree with a __syncthreads per level.
__global__ void max_block_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t inner) {
    __shared__ float smem[THREADS];
    const int64_t idx = blockIdx.x;
    const int64_t o = idx / inner, i = idx % inner;
    const float* p = x + o * n * inner + i;
    float best = -INFINITY;
    for (int64_t r = threadIdx.x; r < n; r += THREADS) best = fmaxf(best, p[r * inner]);
    smem[threadIdx.x] = best;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] = fmaxf(smem[threadIdx.x], smem[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) y[idx] = smem[0];
}

torch::Tensor max_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t nd = x.dim();
    const int64_t d = dim < 0 ? dim + nd : dim;
    TORCH_CHECK(d >= 0 && d < nd && x.size(d) > 0, "dim out of range or empty");
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
    const int64_t n = x.size(d);
    TORCH_CHECK(total < 2147483647LL, "too many outputs");
    max_block_kernel<<<(unsigned)total, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor max_dim_forward(torch::Tensor x, int64_t dim);"

ext = load_inline(
    name="rlk_builtin_max_dim_cuda_block_per_row_smem",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["max_dim_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.max_dim_forward(x.contiguous(), self.dim)
