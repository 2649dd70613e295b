import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cstdint>

constexpr int THREADS = 256, RPB = THREADS / 32;  // one warp per row, 8 rows per block

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Fallback: one warp per row, scalar loads, three passes.
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

constexpr int NV = 8;  // float4 per lane held in registers: rows of up to 32 * 4 * NV = 1024 floats

__device__ __forceinline__ float sq4(float4 v, float m) {
    const float a = v.x - m, b = v.y - m, c = v.z - m, d = v.w - m;
    return (a * a + b * b) + (c * c + d * d);
}

// One warp per row; the row is read once (float4) into registers and both statistics use them.
__global__ void ln_reg_kernel(const float4* __restrict__ x, const float4* __restrict__ w,
                              const float4* __restrict__ b, float4* __restrict__ y,
                              int64_t rows, int c4, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)RPB + (threadIdx.x >> 5);
    if (r >= rows) return;
    float4 v[NV];
    float s = 0.0f, sq = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int j = lane + 32 * k;
        v[k] = j < c4 ? x[r * c4 + j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    const float n = 4.0f * c4, m = warp_sum(s) / n;
#pragma unroll
    for (int k = 0; k < NV; ++k) if (lane + 32 * k < c4) sq += sq4(v[k], m);
    const float rs = rsqrtf(warp_sum(sq) / n + eps);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int j = lane + 32 * k;
        if (j < c4) {
            const float4 g = w[j], h = b[j];
            y[r * c4 + j] = make_float4((v[k].x - m) * rs * g.x + h.x, (v[k].y - m) * rs * g.y + h.y,
                                        (v[k].z - m) * rs * g.z + h.z, (v[k].w - m) * rs * g.w + h.w);
        }
    }
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
    const uintptr_t addr = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(wp) |
                           reinterpret_cast<uintptr_t>(bp) | reinterpret_cast<uintptr_t>(yp);
    if (cols % 4 == 0 && cols <= 128 * NV && (addr & 15) == 0) {
        ln_reg_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(
            reinterpret_cast<const float4*>(xp), reinterpret_cast<const float4*>(wp),
            reinterpret_cast<const float4*>(bp), reinterpret_cast<float4*>(yp), rows, (int)(cols / 4), (float)eps);
    } else {
        ln_warp_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(xp, wp, bp, yp, rows, cols, (float)eps);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

ext = load_inline(
    name="rlk_builtin_layernorm_cuda_warp_float4_regcache",
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
