import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int THREADS = 256, RPB = THREADS / 32;  // one warp per row, 8 rows per block

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// One warp per row, scalar strided loads: mean, variance around the mean, affine output.
__global__ void ln_warp_kernel(const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, float* __restrict__ y,
                               int64_t rows, int64_t cols, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)RPB + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warp leaves together
    const float* row = x + r * cols;
    float* orow = y + r * cols;
    float s = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) s += row[c];
    const float mean = warp_sum(s) / cols;
    float sq = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) { const float d = row[c] - mean; sq += d * d; }
    const float rstd = rsqrtf(warp_sum(sq) / cols + eps);
    for (int64_t c = lane; c < cols; c += 32) orow[c] = (row[c] - mean) * rstd * w[c] + b[c];
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == cols && bias.numel() == cols, "last dim must match weight");
    auto y = torch::empty_like(x);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    if (rows == 0) return y;
    const int64_t blocks = (rows + RPB - 1) / RPB;
    TORCH_CHECK(blocks < 2147483647LL, "too many rows");
    const float *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>(), *bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    auto stream = at::cuda::getCurrentCUDAStream();
    ln_warp_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(xp, wp, bp, yp, rows, cols, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

ext = load_inline(
    name="rlk_builtin_layernorm_cuda_warp_per_row",
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
