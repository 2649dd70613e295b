import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int TS = 16, CB = 16, CT = 4;  // 16x16 pixels/block, CB out-channels/thread, CT in-channels/step

// Stages CT haloed input planes + CB x CT x KH x KW weights in shared memory; each input value feeds
// CB register FMAs (weight reads are broadcasts).
__global__ void __launch_bounds__(TS * TS) conv2d_cout_kernel(
    const float* __restrict__ X, const float* __restrict__ W, const float* __restrict__ bias, float* __restrict__ Y,
    int Cin, int H, int Wd, int Cout, int KH, int KW, int Ho, int Wo, int pad) {
    extern __shared__ float sm[];
    const int IH = TS + KH - 1, IW = TS + KW - 1, KK = KH * KW, tilesX = (Wo + TS - 1) / TS;
    float* xs = sm;                 // [CT][IH][IW]
    float* ws = sm + CT * IH * IW;  // [CB][CT][KK]
    const int t = threadIdx.x, tx = t % TS, ty = t / TS;
    const int ox0 = (blockIdx.x % tilesX) * TS, oy0 = (blockIdx.x / tilesX) * TS;
    const int co0 = blockIdx.y * CB, n = blockIdx.z;
    const float* Xn = X + (int64_t)n * Cin * H * Wd;
    float acc[CB] = {};
    for (int c0 = 0; c0 < Cin; c0 += CT) {
        for (int e = t; e < CT * IH * IW; e += TS * TS) {
            const int ci = c0 + e / (IH * IW), r = e % (IH * IW);
            const int ih = oy0 - pad + r / IW, iw = ox0 - pad + r % IW;
            xs[e] = (ci < Cin && ih >= 0 && ih < H && iw >= 0 && iw < Wd) ? Xn[((int64_t)ci * H + ih) * Wd + iw] : 0.0f;
        }
        for (int e = t; e < CB * CT * KK; e += TS * TS) {
            const int c = e / (CT * KK), ci = (e / KK) % CT, k = e % KK;
            ws[e] = (co0 + c < Cout && c0 + ci < Cin) ? W[((int64_t)(co0 + c) * Cin + c0 + ci) * KK + k] : 0.0f;
        }
        __syncthreads();
        for (int ci = 0; ci < CT; ++ci)
            for (int kh = 0; kh < KH; ++kh)
                for (int kw = 0; kw < KW; ++kw) {
                    const float xv = xs[(ci * IH + ty + kh) * IW + tx + kw];
                    const float* wp = ws + ci * KK + kh * KW + kw;
#pragma unroll
                    for (int c = 0; c < CB; ++c) acc[c] += xv * wp[c * CT * KK];
                }
        __syncthreads();
    }
    const int oy = oy0 + ty, ox = ox0 + tx;
    if (oy >= Ho || ox >= Wo) return;
#pragma unroll
    for (int c = 0; c < CB; ++c)
        if (co0 + c < Cout) Y[(((int64_t)n * Cout + co0 + c) * Ho + oy) * Wo + ox] = acc[c] + bias[co0 + c];
}

torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "bad x");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1), "bad shapes");
    const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), Wd = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t Ho = H + 2 * pad - KH + 1, Wo = Wd + 2 * pad - KW + 1;
    TORCH_CHECK(Ho > 0 && Wo > 0, "input too small for the kernel");
    TORCH_CHECK(KH <= 8 && KW <= 8 && B <= 65535, "shape out of range");
    auto y = torch::empty({B, Cout, Ho, Wo}, x.options());
    if (B == 0 || Cout == 0) return y;
    const int64_t tiles = ((Ho + TS - 1) / TS) * ((Wo + TS - 1) / TS);
    const dim3 grid((unsigned)tiles, (unsigned)((Cout + CB - 1) / CB), (unsigned)B);
    const size_t smem = (size_t)(CT * (TS + KH - 1) * (TS + KW - 1) + CB * CT * KH * KW) * sizeof(float);
    conv2d_cout_kernel<<<grid, TS * TS, smem, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
        (int)Cin, (int)H, (int)Wd, (int)Cout, (int)KH, (int)KW, (int)Ho, (int)Wo, (int)pad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad);"

ext = load_inline(
    name="rlk_builtin_conv2d_cuda_cout_blocked",
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
