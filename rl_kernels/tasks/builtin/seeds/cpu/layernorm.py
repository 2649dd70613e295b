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
    const float* w = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = in + r * cols;
        double mean = 0.0;
        for (int64_t c = 0; c < cols; ++c) mean += row[c];
        mean /= cols;
        double var = 0.0;
        for (int64_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
        var /= cols;
        const double rstd = 1.0 / std::sqrt(var + eps);
        for (int64_t c = 0; c < cols; ++c) {
            out[r * cols + c] = static_cast<float>((row[c] - mean) * rstd) * w[c] + b[c];
        }
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_layernorm_cpu",
    cpp_sources=cpp_source,
    functions=["layernorm_forward"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.bias = nn.Parameter(0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.layernorm_forward(x.contiguous(), self.weight.contiguous(), self.bias.contiguous(), self.eps)
