// Naive hgemm candidate: one thread per element of C, fp32 accumulate, straight from global
// memory. Correct for any M, N, K; the slowest correct kernel, a floor for speedup tests.
#include <torch/extension.h>
#include <cuda_fp16.h>

namespace {

__global__ void hgemm_naive_kernel(const __half* __restrict__ a, const __half* __restrict__ b,
                                   __half* __restrict__ c, int m, int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) {
    acc += __half2float(a[(size_t)row * k + p]) * __half2float(b[(size_t)p * n + col]);
  }
  c[(size_t)row * n + col] = __float2half(acc);
}

}  // namespace

void hgemm_naive(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.options().dtype() == torch::kHalf && b.options().dtype() == torch::kHalf &&
                  c.options().dtype() == torch::kHalf,
              "hgemm_naive: a, b and c must be fp16");
  const int m = a.size(0);
  const int k = a.size(1);
  const int n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "hgemm_naive: shape mismatch");
  const dim3 block(32, 8);
  const dim3 grid((n + block.x - 1) / block.x, (m + block.y - 1) / block.y);
  hgemm_naive_kernel<<<grid, block>>>(reinterpret_cast<const __half*>(a.data_ptr()),
                                      reinterpret_cast<const __half*>(b.data_ptr()),
                                      reinterpret_cast<__half*>(c.data_ptr()), m, n, k);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "hgemm_naive: kernel launch failed");
}
