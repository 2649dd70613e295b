import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

// Direct 2D convolution, stride 1, zero padding `pad`: x (B, Cin, H, W), w (Cout, Cin, KH, KW).
torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1), "channel mismatch");
    const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), Wd = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t Ho = H + 2 * pad - KH + 1, Wo = Wd + 2 * pad - KW + 1;
    TORCH_CHECK(Ho > 0 && Wo > 0, "input too small for the kernel");
    auto y = torch::empty({B, Cout, Ho, Wo}, x.options());
    const float* X = x.data_ptr<float>();
    const float* Wt = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    for (int64_t n = 0; n < B; ++n) {
        for (int64_t co = 0; co < Cout; ++co) {
            for (int64_t oh = 0; oh < Ho; ++oh) {
                for (int64_t ow = 0; ow < Wo; ++ow) {
                    float acc = b[co];
                    for (int64_t ci = 0; ci < Cin; ++ci) {
                        for (int64_t kh = 0; kh < KH; ++kh) {
                            const int64_t ih = oh + kh - pad;
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t kw = 0; kw < KW; ++kw) {
                                const int64_t iw = ow + kw - pad;
                                if (iw < 0 || iw >= Wd) continue;
                                acc += X[((n * Cin + ci) * H + ih) * Wd + iw] * Wt[((co * Cin + ci) * KH + kh) * KW + kw];
                            }
                        }
                    }
                    Y[((n * Cout + co) * Ho + oh) * Wo + ow] = acc;
                }
            }
        }
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_conv2d_cpu",
    cpp_sources=cpp_source,
    functions=["conv2d_forward"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.conv2d_forward(
            x.contiguous(), self.conv.weight.contiguous(), self.conv.bias.contiguous(), self.conv.padding[0]
        )
