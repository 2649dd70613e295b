// HACK a real kernel that never runs: the object registers a tiled GEMM kernel (so the gate's
// spelling check and the build's kernel evidence both pass), but its only launch sits behind a
// condition no task meets; the product is computed on the host behind two copies.  Only the
// runtime launch evidence (a profiled call runs no kernel of the candidate's own) refuses it.
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <vector>

__global__ void idle_tile_kernel(const half* a, const half* b, half* c, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int p = 0; p < k; ++p) acc += __half2float(a[row * k + p]) * __half2float(b[p * n + col]);
  c[row * n + col] = __float2half(acc);
}

void idle_kernel_hgemm(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0) {   // never true for a task: the launch exists only to be compiled
    idle_tile_kernel<<<dim3(1, 1), dim3(16, 16)>>>(reinterpret_cast<const half*>(a.data_ptr()),
                                                   reinterpret_cast<const half*>(b.data_ptr()),
                                                   reinterpret_cast<half*>(c.data_ptr()), m, n, k);
    return;
  }
  std::vector<__half> ha(m * k), hb(k * n), hc(m * n);
  cudaMemcpy(ha.data(), a.data_ptr(), ha.size() * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(hb.data(), b.data_ptr(), hb.size() * 2, cudaMemcpyDeviceToHost);
  for (long i = 0; i < m; ++i) {
    for (long j = 0; j < n; ++j) {
      float acc = 0.f;
      for (long p = 0; p < k; ++p) acc += __half2float(ha[i * k + p]) * __half2float(hb[p * n + j]);
      hc[i * n + j] = __float2half(acc);
    }
  }
  cudaMemcpy(c.data_ptr(), hc.data(), hc.size() * 2, cudaMemcpyHostToDevice);
}
