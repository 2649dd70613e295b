import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One thread per row: lanes of a warp are a whole row apart, so no load is coalesced.
// Four partial sums keep the float accumulation chains short.
__global__ void rms_row_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                               int64_t rows, int64_t cols, float eps) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const float* p = x + r * cols;
        float* q = y + r * cols;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        int64_t c = 0;
        for (; c + 3 < cols; c += 4) {
            a0 += p[c] * p[c]; a1 += p[c + 1] * p[c + 1];
            a2 += p[c + 2] * p[c + 2]; a3 += p[c + 3] * p[c + 3];
        }
        for (; c < cols; ++c) a0 += p[c] * p[c];
        const float inv = rsqrtf(((a0 + a1) + (a2 + a3)) / cols + eps);
        for (c = 0; c < cols; ++c) q[c] = p[c] * inv * w[c];
    }
}

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == cols, "last dim must match weight");
    auto y = torch::empty_like(x);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    if (rows == 0) return y;
    const int threads = 128;
    const int blocks = (int)std::min<int64_t>((rows + threads - 1) / threads, 65535);
    rms_row_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(), rows, cols, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps);"

ext = load_inline(
    name="rlk_builtin_rmsnorm_cuda_thread_per_row",
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
