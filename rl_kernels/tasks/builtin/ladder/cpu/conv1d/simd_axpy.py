import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>

// Per (n, co): the output row starts at the bias; each (ci, k) tap adds w * shifted x row (SIMD).
torch::Tensor conv1d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    TORCH_CHECK(x.dim() == 3 && weight.dim() == 3 && x.size(1) == weight.size(1), "channel mismatch");
    const int64_t B = x.size(0), Cin = x.size(1), L = x.size(2);
    const int64_t Cout = weight.size(0), KS = weight.size(2);
    const int64_t Lout = L + 2 * pad - KS + 1;
    TORCH_CHECK(Lout > 0, "input too short for the kernel");
    auto y = torch::empty({B, Cout, Lout}, x.options());
    const float *X = x.data_ptr<float>(), *W = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    for (int64_t n = 0; n < B; ++n)
        for (int64_t co = 0; co < Cout; ++co) {
            float* yr = Y + (n * Cout + co) * Lout;
            for (int64_t l = 0; l < Lout; ++l) yr[l] = b[co];
            for (int64_t ci = 0; ci < Cin; ++ci) {
                const float* xr = X + (n * Cin + ci) * L;
                for (int64_t k = 0; k < KS; ++k) {
                    const float wk = W[(co * Cin + ci) * KS + k];
                    const int64_t sh = k - pad;
                    const int64_t l0 = std::max<int64_t>(0, -sh), l1 = std::min(Lout, L - sh);
#pragma omp simd
                    for (int64_t l = l0; l < l1; ++l) yr[l] += wk * xr[l + sh];
                }
            }
        }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_conv1d_cpu_simd_axpy",
    cpp_sources=cpp_source,
    functions=["conv1d_forward"],
    extra_cflags=["-O3", "-fopenmp-simd"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.conv1d_forward(
            x.contiguous(), self.conv.weight.contiguous(), self.conv.bias.contiguous(), self.conv.padding[0]
        )
