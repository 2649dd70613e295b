import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cstdint>

constexpr int THREADS = 256;
constexpr int MAX_BLOCKS = 1024;

__device__ __forceinline__ double block_sum(double v) {  // warp shuffles, then one warp over the warp sums
    __shared__ double warp_sums[THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
    __syncthreads();
    v = threadIdx.x < THREADS / 32 ? warp_sums[threadIdx.x] : 0.0;
    if (threadIdx.x < 32)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;  // valid in thread 0
}

// Pass 1: grid-stride over float4 pairs (n4 vectors, 0 if unaligned), scalar tail, one partial per block.
__global__ void mse_partial_kernel(const float* __restrict__ p, const float* __restrict__ t,
                                   float* __restrict__ partial, int64_t n, int64_t n4) {
    const int64_t gid = blockIdx.x * (int64_t)THREADS + threadIdx.x, stride = (int64_t)gridDim.x * THREADS;
    const float4* p4 = reinterpret_cast<const float4*>(p);
    const float4* t4 = reinterpret_cast<const float4*>(t);
    double acc = 0.0;
    for (int64_t i = gid; i < n4; i += stride) {
        const float4 a = p4[i], b = t4[i];
        const double d0 = (double)a.x - b.x, d1 = (double)a.y - b.y, d2 = (double)a.z - b.z, d3 = (double)a.w - b.w;
        acc += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
    for (int64_t i = n4 * 4 + gid; i < n; i += stride) {
        const double d = (double)p[i] - (double)t[i];
        acc += d * d;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = (float)acc;
}

// Pass 2: one block adds the partials in a fixed order (deterministic) and divides by n.
__global__ void mse_final_kernel(const float* __restrict__ partial, int nb, float* __restrict__ out, int64_t n) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < nb; i += THREADS) acc += (double)partial[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] = (float)(acc / (double)n);
}

torch::Tensor mse_loss_forward(torch::Tensor pred, torch::Tensor target) {
    TORCH_CHECK(pred.is_cuda() && target.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(pred.scalar_type() == torch::kFloat32 && target.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(pred.is_contiguous() && target.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(pred.sizes() == target.sizes(), "predictions and targets must have the same shape");
    const int64_t n = pred.numel();
    const float* p = pred.data_ptr<float>();
    const float* t = target.data_ptr<float>();
    const bool aligned = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(t)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    const int64_t work = aligned ? n4 + (n & 3) : n;
    auto y = torch::empty({}, pred.options());
    const int nb = (int)std::max<int64_t>(1, std::min<int64_t>((work + THREADS - 1) / THREADS, MAX_BLOCKS));
    auto partial = torch::empty({nb}, pred.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    mse_partial_kernel<<<nb, THREADS, 0, stream>>>(p, t, partial.data_ptr<float>(), n, n4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    mse_final_kernel<<<1, THREADS, 0, stream>>>(partial.data_ptr<float>(), nb, y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor mse_loss_forward(torch::Tensor pred, torch::Tensor target);"

ext = load_inline(
    name="rlk_builtin_mse_loss_cuda_float4_shuffle",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["mse_loss_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ext.mse_loss_forward(predictions.contiguous(), targets.contiguous())
