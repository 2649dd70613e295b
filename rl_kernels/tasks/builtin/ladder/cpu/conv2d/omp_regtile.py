import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>

// Zero-padded copy of x, then 4 channels x 16 columns of one output row held in registers.
torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.dim() == 4, "bad x");
    TORCH_CHECK(weight.dim() == 4 && x.size(1) == weight.size(1), "bad weight");
    const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), Wd = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t Ho = H + 2 * pad - KH + 1, Wo = Wd + 2 * pad - KW + 1;
    const int64_t Hp = H + 2 * pad, Wp = (Wo + 15) / 16 * 16 + KW - 1;
    TORCH_CHECK(Ho > 0 && Wo > 0, "input too small");
    auto y = torch::empty({B, Cout, Ho, Wo}, x.options());
    auto xp = torch::empty({B, Cin, Hp, Wp}, x.options());
    const float *X = x.data_ptr<float>(), *Wt = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
    float *Y = y.data_ptr<float>(), *P = xp.data_ptr<float>();
#pragma omp parallel for collapse(2)
    for (int64_t r = 0; r < B * Cin; ++r)
        for (int64_t h = 0; h < Hp; ++h)
            for (int64_t w = 0; w < Wp; ++w) {
                const int64_t ih = h - pad, iw = w - pad;
                P[(r * Hp + h) * Wp + w] = (ih >= 0 && ih < H && iw >= 0 && iw < Wd) ? X[(r * H + ih) * Wd + iw] : 0.0f;
            }
#pragma omp parallel for collapse(3) schedule(dynamic)
    for (int64_t n = 0; n < B; ++n)
        for (int64_t c0 = 0; c0 < Cout; c0 += 4)
            for (int64_t oh = 0; oh < Ho; ++oh)
                for (int64_t w0 = 0; w0 < Wo; w0 += 16) {
                    int64_t co[4];  // past Cout: repeat last, not stored
                    float acc[4][16];
                    for (int r = 0; r < 4; ++r)
                        for (int q = 0; q < 16; ++q) acc[r][q] = b[co[r] = std::min(c0 + r, Cout - 1)];
                    for (int64_t ci = 0; ci < Cin; ++ci)
                        for (int64_t kh = 0; kh < KH; ++kh) {
                            const float* xr = P + ((n * Cin + ci) * Hp + oh + kh) * Wp + w0;
                            for (int64_t kw = 0; kw < KW; ++kw)
                                for (int r = 0; r < 4; ++r) {
                                    const float w = Wt[((co[r] * Cin + ci) * KH + kh) * KW + kw];
#pragma omp simd
                                    for (int q = 0; q < 16; ++q) acc[r][q] += w * xr[kw + q];
                                }
                        }
                    for (int64_t r = 0; r < std::min<int64_t>(4, Cout - c0); ++r)
                        for (int64_t q = 0; q < std::min<int64_t>(16, Wo - w0); ++q)
                            Y[((n * Cout + c0 + r) * Ho + oh) * Wo + w0 + q] = acc[r][q];
                }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_conv2d_cpu_omp_regtile",
    cpp_sources=cpp_source,
    functions=["conv2d_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.conv2d_forward(
            x.contiguous(), self.conv.weight.contiguous(), self.conv.bias.contiguous(), self.conv.padding[0]
        )
