import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int THREADS = 256;  // power of two: the tree reduction halves it

// One kernel per operator of the reference, as eager runs it: every intermediate goes to global memory.
__global__ void square_kernel(const float* __restrict__ x, float* __restrict__ sq, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (i < n) sq[i] = x[i] * x[i];
}

// One block per row: mean over the row through a shared-memory tree.
__global__ void row_mean_kernel(const float* __restrict__ a, float* __restrict__ mean, int64_t cols) {
    __shared__ float smem[THREADS];
    const float* row = a + blockIdx.x * cols;
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) acc += row[c];
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) mean[blockIdx.x] = smem[0] / (float)cols;
}

__global__ void add_rsqrt_kernel(const float* __restrict__ ms, float* __restrict__ inv, int64_t rows, float eps) {
    const int64_t r = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (r < rows) inv[r] = rsqrtf(ms[r] + eps);
}

__global__ void mul_row_kernel(const float* __restrict__ x, const float* __restrict__ inv, float* __restrict__ t,
                               int64_t n, int64_t cols) {
    const int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (i < n) t[i] = x[i] * inv[i / cols];
}

__global__ void mul_col_kernel(const float* __restrict__ t, const float* __restrict__ w, float* __restrict__ y,
                               int64_t n, int64_t cols) {
    const int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (i < n) y[i] = t[i] * w[i % cols];
}

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == cols, "last dim must match weight");
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    const int64_t rows = cols == 0 ? 0 : n / cols;
    if (rows == 0) return y;
    TORCH_CHECK(rows < 2147483647LL, "too many rows");
    auto sq = torch::empty_like(x), t = torch::empty_like(x);
    auto ms = torch::empty({rows}, x.options()), inv = torch::empty({rows}, x.options());
    const unsigned elem_blocks = (unsigned)((n + THREADS - 1) / THREADS);
    const unsigned row_blocks = (unsigned)((rows + THREADS - 1) / THREADS);
    auto stream = at::cuda::getCurrentCUDAStream();
    square_kernel<<<elem_blocks, THREADS, 0, stream>>>(x.data_ptr<float>(), sq.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    row_mean_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(sq.data_ptr<float>(), ms.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    add_rsqrt_kernel<<<row_blocks, THREADS, 0, stream>>>(ms.data_ptr<float>(), inv.data_ptr<float>(), rows, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    mul_row_kernel<<<elem_blocks, THREADS, 0, stream>>>(x.data_ptr<float>(), inv.data_ptr<float>(), t.data_ptr<float>(),
                                                       n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    mul_col_kernel<<<elem_blocks, THREADS, 0, stream>>>(t.data_ptr<float>(), weight.data_ptr<float>(),
                                                       y.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps);"

ext = load_inline(
    name="rlk_builtin_rmsnorm_cuda_op_by_op",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["rmsnorm_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.rmsnorm_forward(x.contiguous(), self.weight.contiguous(), self.eps)
