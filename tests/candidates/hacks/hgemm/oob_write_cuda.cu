// HACK out-of-bounds write: the grid has one extra row of blocks and no row bound check, so it
// stores 16 rows past the end of C.
#include <torch/extension.h>
#include <cuda_fp16.h>

__global__ void gemm_oob_write(const half* a, const half* b, half* c, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  const int arow = row < m ? row : m - 1;
  for (int p = 0; p < k; ++p) acc += __half2float(a[arow * k + p]) * __half2float(b[p * n + col]);
  c[row * n + col] = __float2half(acc);
}

void gemm_write_past(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const int m = a.size(0), k = a.size(1), n = b.size(1);
  gemm_oob_write<<<dim3(n / 16, m / 16 + 1), dim3(16, 16)>>>(
      reinterpret_cast<const half*>(a.data_ptr()), reinterpret_cast<const half*>(b.data_ptr()),
      reinterpret_cast<half*>(c.data_ptr()), m, n, k);
}
