import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int THREADS = 256;  // power of two: the tree reduction halves it

// One kernel per operator of the decomposed layer norm, every intermediate in global memory.
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

__global__ void sub_row_kernel(const float* __restrict__ x, const float* __restrict__ mean, float* __restrict__ xc,
                               int64_t n, int64_t cols) {
    const int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (i < n) xc[i] = x[i] - mean[i / cols];
}

__global__ void square_kernel(const float* __restrict__ a, float* __restrict__ sq, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (i < n) sq[i] = a[i] * a[i];
}

__global__ void add_rsqrt_kernel(const float* __restrict__ var, float* __restrict__ rstd, int64_t rows, float eps) {
    const int64_t r = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (r < rows) rstd[r] = rsqrtf(var[r] + eps);
}

__global__ void mul_row_kernel(const float* __restrict__ xc, const float* __restrict__ rstd, float* __restrict__ xn,
                               int64_t n, int64_t cols) {
    const int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (i < n) xn[i] = xc[i] * rstd[i / cols];
}

__global__ void affine_kernel(const float* __restrict__ xn, const float* __restrict__ w, const float* __restrict__ b,
                              float* __restrict__ y, int64_t n, int64_t cols) {
    const int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x;
    if (i < n) y[i] = xn[i] * w[i % cols] + b[i % cols];
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == cols && bias.numel() == cols, "last dim must match weight and bias");
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    const int64_t rows = cols == 0 ? 0 : n / cols;
    if (rows == 0) return y;
    TORCH_CHECK(rows < 2147483647LL, "too many rows");
    auto xc = torch::empty_like(x), sq = torch::empty_like(x), xn = torch::empty_like(x);
    auto mean = torch::empty({rows}, x.options()), var = torch::empty({rows}, x.options());
    auto rstd = torch::empty({rows}, x.options());
    const unsigned elem_blocks = (unsigned)((n + THREADS - 1) / THREADS);
    const unsigned row_blocks = (unsigned)((rows + THREADS - 1) / THREADS);
    auto stream = at::cuda::getCurrentCUDAStream();
    row_mean_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), mean.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    sub_row_kernel<<<elem_blocks, THREADS, 0, stream>>>(x.data_ptr<float>(), mean.data_ptr<float>(),
                                                       xc.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    square_kernel<<<elem_blocks, THREADS, 0, stream>>>(xc.data_ptr<float>(), sq.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    row_mean_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(sq.data_ptr<float>(), var.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    add_rsqrt_kernel<<<row_blocks, THREADS, 0, stream>>>(var.data_ptr<float>(), rstd.data_ptr<float>(), rows,
                                                        (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    mul_row_kernel<<<elem_blocks, THREADS, 0, stream>>>(xc.data_ptr<float>(), rstd.data_ptr<float>(),
                                                       xn.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    affine_kernel<<<elem_blocks, THREADS, 0, stream>>>(xn.data_ptr<float>(), weight.data_ptr<float>(),
                                                      bias.data_ptr<float>(), y.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

ext = load_inline(
    name="rlk_builtin_layernorm_cuda_op_by_op",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.bias = nn.Parameter(0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.layernorm_forward(x.contiguous(), self.weight.contiguous(), self.bias.contiguous(), self.eps)
