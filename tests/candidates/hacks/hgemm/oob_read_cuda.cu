// HACK out-of-bounds read: the K loop runs one step too far (p <= k), reading the next row of A and
// one row past the end of B.
#include <torch/extension.h>
#include <cuda_fp16.h>

__global__ void gemm_oob_read(const half* a, const half* b, half* c, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.0f;
  for (int p = 0; p <= k; ++p) acc += __half2float(a[row * k + p]) * __half2float(b[p * n + col]);
  c[row * n + col] = __float2half(acc);
}

void gemm_read_past(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const int m = a.size(0), k = a.size(1), n = b.size(1);
  gemm_oob_read<<<dim3(n / 16, m / 16), dim3(16, 16)>>>(
      reinterpret_cast<const half*>(a.data_ptr()), reinterpret_cast<const half*>(b.data_ptr()),
      reinterpret_cast<half*>(c.data_ptr()), m, n, k);
}
