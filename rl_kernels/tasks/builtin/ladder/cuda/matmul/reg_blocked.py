import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int BM = 64, BN = 64, BK = 16;  // 64x64 block tile, 256 threads, 4x4 outputs per thread

// Thread (tx, ty) owns rows ty+16i and columns tx+16j (i, j < 4): per k it loads 4+4 values from
// shared memory and does 16 FMAs in registers. Stores stay coalesced along the columns.
__global__ void __launch_bounds__(256) matmul_reg_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    __shared__ float As[BK][BM + 4];  // A tile stored transposed: As[k][m]
    __shared__ float Bs[BK][BN];
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    const int64_t m0 = blockIdx.y * (int64_t)BM, n0 = blockIdx.x * (int64_t)BN;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int e = t + 256 * p;
            const int am = e / BK, ak = e % BK;
            As[ak][am] = (m0 + am < M && k0 + ak < K) ? A[(m0 + am) * K + k0 + ak] : 0.0f;
            const int bk = e / BN, bn = e % BN;
            Bs[bk][bn] = (k0 + bk < K && n0 + bn < N) ? B[(k0 + bk) * N + n0 + bn] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) { a[i] = As[k][ty + 16 * i]; b[i] = Bs[k][tx + 16 * i]; }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t m = m0 + ty + 16 * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t n = n0 + tx + 16 * j;
            if (n < N) C[m * N + n] = acc[i][j];
        }
    }
}

torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "expected (M,K) @ (K,N)");
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({M, N}, a.options());
    if (M == 0 || N == 0) return c;
    const dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
    matmul_reg_kernel<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

cpp_source = "torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b);"

ext = load_inline(
    name="rlk_builtin_matmul_cuda_reg_blocked",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matmul_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ext.matmul_forward(a.contiguous(), b.contiguous())
