import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

// Deliberately cache-hostile loop order: feature outer, row inner (stride f floats per access).
torch::Tensor scale_bias_relu_forward(torch::Tensor x, torch::Tensor scale, torch::Tensor bias) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    const int64_t f = scale.numel();
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == f && bias.numel() == f, "last dim must match scale/bias");
    auto y = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    const float* s = scale.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const int64_t rows = f == 0 ? 0 : x.numel() / f;
    for (int64_t j = 0; j < f; ++j) {
        const float sj = s[j], bj = b[j];
        for (int64_t r = 0; r < rows; ++r) {
            const float v = in[r * f + j] * sj + bj;
            out[r * f + j] = v > 0.0f ? v : 0.0f;
        }
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_scale_bias_relu_cpu_column_outer",
    cpp_sources=cpp_source,
    functions=["scale_bias_relu_forward"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.scale_bias_relu_forward(x.contiguous(), self.scale.contiguous(), self.bias.contiguous())
