import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    const int64_t cols = weight.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == cols && bias.numel() == cols, "last dim must match weight");
    auto y = torch::empty_like(x);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    const float* in = x.data_ptr<float>();
    const float* __restrict w = weight.data_ptr<float>();
    const float* __restrict b = bias.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict row = in + r * cols;
        float* __restrict o = out + r * cols;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < cols; ++c) s += row[c];
        const float mean = static_cast<float>(s / cols);
        double q = 0.0;
#pragma omp simd reduction(+ : q)
        for (int64_t c = 0; c < cols; ++c) {
            const float dv = row[c] - mean;
            q += dv * dv;
        }
        const float rstd = static_cast<float>(1.0 / std::sqrt(q / cols + eps));
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) o[c] = (row[c] - mean) * rstd * w[c] + b[c];
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_layernorm_cpu_simd_rows",
    cpp_sources=cpp_source,
    functions=["layernorm_forward"],
    extra_cflags=["-O3", "-fopenmp-simd"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.bias = nn.Parameter(0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.layernorm_forward(x.contiguous(), self.weight.contiguous(), self.bias.contiguous(), self.eps)
