import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cstdint>

constexpr int THREADS = 256, RPB = THREADS / 32;  // one warp per row, 8 rows per block

// float4 part (c4 groups, 0 when !vec) then scalar part (empty when vec).
__global__ void rms_warp_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                int64_t rows, int64_t cols, float eps, bool vec) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)RPB + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warp leaves together
    const float* row = x + r * cols;
    float* orow = y + r * cols;
    const float4* r4 = reinterpret_cast<const float4*>(row);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* o4 = reinterpret_cast<float4*>(orow);
    const int64_t c4 = vec ? cols / 4 : 0;
    float sq = 0.0f;
    for (int64_t j = lane; j < c4; j += 32) {
        const float4 v = r4[j];
        sq += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    }
    for (int64_t c = 4 * c4 + lane; c < cols; c += 32) sq += row[c] * row[c];
    for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
    const float inv = rsqrtf(sq / cols + eps);
    for (int64_t j = lane; j < c4; j += 32) {
        const float4 v = r4[j], g = w4[j];
        o4[j] = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
    }
    for (int64_t c = 4 * c4 + lane; c < cols; c += 32) orow[c] = row[c] * inv * w[c];
}

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == cols, "last dim must match weight");
    auto y = torch::empty_like(x);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    if (rows == 0) return y;
    const float *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const uintptr_t addr = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(wp) | reinterpret_cast<uintptr_t>(yp);
    const bool vec = cols % 4 == 0 && (addr & 15) == 0;
    const int64_t blocks = (rows + RPB - 1) / RPB;
    TORCH_CHECK(blocks < 2147483647LL, "too many rows");
    rms_warp_kernel<<<(unsigned)blocks, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        xp, wp, yp, rows, cols, (float)eps, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps);"

ext = load_inline(
    name="rlk_builtin_rmsnorm_cuda_warp_per_row_float4",
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
