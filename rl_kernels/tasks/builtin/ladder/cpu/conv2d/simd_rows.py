import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>

// Per (n, co): the plane starts at the bias; each (ci, kh, kw) tap adds w * shifted x rows (SIMD).
torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1), "channel mismatch");
    const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), Wd = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t Ho = H + 2 * pad - KH + 1, Wo = Wd + 2 * pad - KW + 1;
    TORCH_CHECK(Ho > 0 && Wo > 0, "input too small for the kernel");
    auto y = torch::empty({B, Cout, Ho, Wo}, x.options());
    const float *X = x.data_ptr<float>(), *Wt = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    for (int64_t n = 0; n < B; ++n)
        for (int64_t co = 0; co < Cout; ++co) {
            float* yp = Y + (n * Cout + co) * Ho * Wo;
            for (int64_t i = 0; i < Ho * Wo; ++i) yp[i] = b[co];
            for (int64_t ci = 0; ci < Cin; ++ci)
                for (int64_t kh = 0; kh < KH; ++kh)
                    for (int64_t kw = 0; kw < KW; ++kw) {
                        const float w = Wt[((co * Cin + ci) * KH + kh) * KW + kw];
                        const int64_t dh = kh - pad, dw = kw - pad;
                        const int64_t w0 = std::max<int64_t>(0, -dw), w1 = std::min(Wo, Wd - dw);
                        for (int64_t oh = std::max<int64_t>(0, -dh); oh < std::min(Ho, H - dh); ++oh) {
                            const float* xr = X + ((n * Cin + ci) * H + oh + dh) * Wd + dw;
                            float* yr = yp + oh * Wo;
#pragma omp simd
                            for (int64_t ow = w0; ow < w1; ++ow) yr[ow] += w * xr[ow];
                        }
                    }
        }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_conv2d_cpu_simd_rows",
    cpp_sources=cpp_source,
    functions=["conv2d_forward"],
    extra_cflags=["-O3", "-fopenmp-simd"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.conv2d_forward(
            x.contiguous(), self.conv.weight.contiguous(), self.conv.bias.contiguous(), self.conv.padding[0]
        )
