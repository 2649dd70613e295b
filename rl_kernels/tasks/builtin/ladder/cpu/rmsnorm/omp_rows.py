import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == cols, "last dim must match weight");
    auto y = torch::empty_like(x);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    const float* in = x.data_ptr<float>();
    const float* __restrict w = weight.data_ptr<float>();
    float* out = y.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict row = in + r * cols;
        float* __restrict o = out + r * cols;
        double sq = 0.0;
#pragma omp simd reduction(+ : sq)
        for (int64_t c = 0; c < cols; ++c) sq += row[c] * row[c];
        const float inv = static_cast<float>(1.0 / std::sqrt(sq / cols + eps));
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) o[c] = row[c] * inv * w[c];
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_rmsnorm_cpu_omp_rows",
    cpp_sources=cpp_source,
    functions=["rmsnorm_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.rmsnorm_forward(x.contiguous(), self.weight.contiguous(), self.eps)
