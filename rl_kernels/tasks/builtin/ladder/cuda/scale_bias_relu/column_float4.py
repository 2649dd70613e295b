import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cstdint>

// 2-D grid: x over columns (float4 groups), y strides over rows; scale/bias loaded once per thread.
__global__ void sbr_vec_kernel(const float4* __restrict__ x, const float4* __restrict__ s,
                               const float4* __restrict__ b, float4* __restrict__ y, int64_t rows, int64_t f4) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= f4) return;
    const float4 sc = s[c], bi = b[c];
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        float4 v = x[r * f4 + c];
        v.x = v.x * sc.x + bi.x; v.x = v.x > 0.0f ? v.x : 0.0f;
        v.y = v.y * sc.y + bi.y; v.y = v.y > 0.0f ? v.y : 0.0f;
        v.z = v.z * sc.z + bi.z; v.z = v.z > 0.0f ? v.z : 0.0f;
        v.w = v.w * sc.w + bi.w; v.w = v.w > 0.0f ? v.w : 0.0f;
        y[r * f4 + c] = v;
    }
}

__global__ void sbr_scalar_kernel(const float* __restrict__ x, const float* __restrict__ s,
                                  const float* __restrict__ b, float* __restrict__ y, int64_t rows, int64_t f) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= f) return;
    const float sc = s[c], bi = b[c];
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float v = x[r * f + c] * sc + bi;
        y[r * f + c] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor scale_bias_relu_forward(torch::Tensor x, torch::Tensor scale, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t f = scale.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == f && bias.numel() == f, "last dim must match scale/bias");
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const int64_t rows = n / f;
    const float *xp = x.data_ptr<float>(), *sp = scale.data_ptr<float>(), *bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const uintptr_t addr = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(sp) |
                           reinterpret_cast<uintptr_t>(bp) | reinterpret_cast<uintptr_t>(yp);
    const bool vec = f % 4 == 0 && (addr & 15) == 0;
    const int64_t cols = vec ? f / 4 : f;
    const int threads = 256;
    const dim3 grid((unsigned)((cols + threads - 1) / threads), (unsigned)std::min<int64_t>(rows, 1024));
    auto stream = at::cuda::getCurrentCUDAStream();
    if (vec) {
        sbr_vec_kernel<<<grid, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(xp), reinterpret_cast<const float4*>(sp),
            reinterpret_cast<const float4*>(bp), reinterpret_cast<float4*>(yp), rows, cols);
    } else {
        sbr_scalar_kernel<<<grid, threads, 0, stream>>>(xp, sp, bp, yp, rows, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor scale_bias_relu_forward(torch::Tensor x, torch::Tensor scale, torch::Tensor bias);"

ext = load_inline(
    name="rlk_builtin_scale_bias_relu_cuda_column_float4",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_bias_relu_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.scale_bias_relu_forward(x.contiguous(), self.scale.contiguous(), self.bias.contiguous())
