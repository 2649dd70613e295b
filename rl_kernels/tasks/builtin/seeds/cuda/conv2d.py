import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// Direct 2D convolution, stride 1, zero padding; one thread per output element (n, co, oh, ow).
__global__ void conv2d_kernel(const float* __restrict__ X, const float* __restrict__ W,
                              const float* __restrict__ bias, float* __restrict__ Y,
                              int64_t B, int64_t Cin, int64_t H, int64_t Wd, int64_t Cout,
                              int64_t KH, int64_t KW, int64_t Ho, int64_t Wo, int64_t pad) {
    const int64_t total = B * Cout * Ho * Wo;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ow = idx % Wo;
        const int64_t oh = (idx / Wo) % Ho;
        const int64_t co = (idx / (Wo * Ho)) % Cout;
        const int64_t n = idx / (Wo * Ho * Cout);
        float acc = bias[co];
        for (int64_t ci = 0; ci < Cin; ++ci) {
            for (int64_t kh = 0; kh < KH; ++kh) {
                const int64_t ih = oh + kh - pad;
                if (ih < 0 || ih >= H) continue;
                for (int64_t kw = 0; kw < KW; ++kw) {
                    const int64_t iw = ow + kw - pad;
                    if (iw < 0 || iw >= Wd) continue;
                    acc += X[((n * Cin + ci) * H + ih) * Wd + iw] * W[((co * Cin + ci) * KH + kh) * KW + kw];
                }
            }
        }
        Y[idx] = acc;
    }
}

torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1), "channel mismatch");
    const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), Wd = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t Ho = H + 2 * pad - KH + 1, Wo = Wd + 2 * pad - KW + 1;
    TORCH_CHECK(Ho > 0 && Wo > 0, "input too small for the kernel");
    auto y = torch::empty({B, Cout, Ho, Wo}, x.options());
    const int64_t total = B * Cout * Ho * Wo;
    if (total == 0) return y;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, 65535);
    conv2d_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
        B, Cin, H, Wd, Cout, KH, KW, Ho, Wo, pad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad);"

ext = load_inline(
    name="rlk_builtin_conv2d_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["conv2d_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.conv2d_forward(
            x.contiguous(), self.conv.weight.contiguous(), self.conv.bias.contiguous(), self.conv.padding[0]
        )
