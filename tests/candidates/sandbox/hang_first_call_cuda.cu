// Hangs at its first call (cuda): a kernel whose K-loop step is computed from the shape and comes
// out 0 for any K under 4096, so every thread loops forever on the device; the host's sync after
// the call never returns.  The step is read through a volatile so the compiler cannot assume the
// loop ends.  The watchdog must report it `hung` within the floor plus one call's allowance.
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <c10/cuda/CUDAStream.h>

namespace {

__global__ void hgemm_rows(const half* __restrict__ a, const half* __restrict__ b, half* __restrict__ c,
                           int m, int n, int k, int step) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  volatile int stride = step;
  float acc = 0.f;
  for (int p0 = 0; p0 < k; p0 += stride) {
    for (int p = p0; p < p0 + 4096 && p < k; ++p) acc += __half2float(a[(size_t)row * k + p]) * __half2float(b[(size_t)p * n + col]);
  }
  c[(size_t)row * n + col] = __float2half(acc);
}

}  // namespace

void hgemm_rows_entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const int m = a.size(0), k = a.size(1), n = b.size(1);
  const int step = k / 4096;   // the bug: a chunk count used as the chunk length
  const dim3 block(16, 16);
  const dim3 grid((n + 15) / 16, (m + 15) / 16);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  hgemm_rows<<<grid, block, 0, stream>>>(reinterpret_cast<const half*>(a.data_ptr()),
                                        reinterpret_cast<const half*>(b.data_ptr()),
                                        reinterpret_cast<half*>(c.data_ptr()), m, n, k, step);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch failed");
}
