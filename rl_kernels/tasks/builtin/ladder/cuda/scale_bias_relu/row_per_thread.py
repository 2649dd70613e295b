import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One thread walks a whole row: lanes of a warp are a full row (f*4 bytes) apart.
__global__ void sbr_row_kernel(const float* __restrict__ x, const float* __restrict__ scale,
                               const float* __restrict__ bias, float* __restrict__ y,
                               int64_t rows, int64_t f) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const float* xr = x + r * f;
        float* yr = y + r * f;
        for (int64_t j = 0; j < f; ++j) {
            const float v = xr[j] * scale[j] + bias[j];
            yr[j] = v > 0.0f ? v : 0.0f;
        }
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
    const int threads = 128;
    const int blocks = (int)std::min<int64_t>((rows + threads - 1) / threads, 65535);
    sbr_row_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), scale.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor scale_bias_relu_forward(torch::Tensor x, torch::Tensor scale, torch::Tensor bias);"

ext = load_inline(
    name="rlk_builtin_scale_bias_relu_cuda_row_per_thread",
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
