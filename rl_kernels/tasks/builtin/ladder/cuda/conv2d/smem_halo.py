import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int TS = 16;  // 16x16 output pixels per block (one per thread)
constexpr int CT = 4;   // input channels staged per step

// Block (spatial tile, co, n): stages CT input planes of (TS+KH-1)x(TS+KW-1) (halo zero-filled) in
// shared memory; each thread convolves its pixel. Weight reads are uniform across the block.
__global__ void conv2d_halo_kernel(const float* __restrict__ X, const float* __restrict__ W,
                                   const float* __restrict__ bias, float* __restrict__ Y,
                                   int Cin, int H, int Wd, int Cout, int KH, int KW, int Ho, int Wo, int pad) {
    extern __shared__ float xs[];  // [CT][IH][IW]
    const int IH = TS + KH - 1, IW = TS + KW - 1, tilesX = (Wo + TS - 1) / TS;
    const int tx = threadIdx.x % TS, ty = threadIdx.x / TS;
    const int ox0 = (blockIdx.x % tilesX) * TS, oy0 = (blockIdx.x / tilesX) * TS;
    const int co = blockIdx.y, n = blockIdx.z;
    const float* Xn = X + (int64_t)n * Cin * H * Wd;
    float acc = 0.0f;
    for (int c0 = 0; c0 < Cin; c0 += CT) {
        for (int e = threadIdx.x; e < CT * IH * IW; e += TS * TS) {
            const int ci = c0 + e / (IH * IW), r = e % (IH * IW);
            const int ih = oy0 - pad + r / IW, iw = ox0 - pad + r % IW;
            xs[e] = (ci < Cin && ih >= 0 && ih < H && iw >= 0 && iw < Wd) ? Xn[((int64_t)ci * H + ih) * Wd + iw] : 0.0f;
        }
        __syncthreads();
        const int cn = min(CT, Cin - c0);
        for (int ci = 0; ci < cn; ++ci) {
            const float* wp = W + ((int64_t)co * Cin + c0 + ci) * KH * KW;
            const float* xp = xs + ci * IH * IW + ty * IW + tx;
            for (int kh = 0; kh < KH; ++kh)
                for (int kw = 0; kw < KW; ++kw) acc += xp[kh * IW + kw] * wp[kh * KW + kw];
        }
        __syncthreads();
    }
    const int oy = oy0 + ty, ox = ox0 + tx;
    if (oy < Ho && ox < Wo) Y[(((int64_t)n * Cout + co) * Ho + oy) * Wo + ox] = acc + bias[co];
}

torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1), "channel mismatch");
    const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), Wd = x.size(3);
    const int64_t Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t Ho = H + 2 * pad - KH + 1, Wo = Wd + 2 * pad - KW + 1;
    TORCH_CHECK(Ho > 0 && Wo > 0, "input too small for the kernel");
    TORCH_CHECK(KH <= 32 && KW <= 32 && B <= 65535 && Cout <= 65535, "shape outside this kernel's limits");
    auto y = torch::empty({B, Cout, Ho, Wo}, x.options());
    if (B == 0 || Cout == 0) return y;
    const int64_t tiles = ((Ho + TS - 1) / TS) * ((Wo + TS - 1) / TS);
    const dim3 grid((unsigned)tiles, (unsigned)Cout, (unsigned)B);
    const size_t smem = (size_t)CT * (TS + KH - 1) * (TS + KW - 1) * sizeof(float);
    conv2d_halo_kernel<<<grid, TS * TS, smem, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
        (int)Cin, (int)H, (int)Wd, (int)Cout, (int)KH, (int)KW, (int)Ho, (int)Wo, (int)pad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad);"

ext = load_inline(
    name="rlk_builtin_conv2d_cuda_smem_halo",
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
