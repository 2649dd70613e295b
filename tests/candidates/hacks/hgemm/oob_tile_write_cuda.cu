// HACK out-of-bounds write (cuda), tile-rounded: a 128x128-tiled fp32-accumulate GEMM with no bounds
// checks; M = 2000 is rounded up to 2048, so the last row of tiles writes 48 whole rows past C's end
// and reads 48 rows past A's.  Every in-bounds value is right; the overrun is the whole trick.
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kTile = 128;

__global__ void gemm_tiles(const half* a, const half* b, half* c, int n, int k) {
  const int row = blockIdx.y * kTile + threadIdx.y * 8;   // 16 x 16 threads, 8 x 8 outputs each
  const int col = blockIdx.x * kTile + threadIdx.x * 8;
  float acc[8][8] = {};
  for (int p = 0; p < k; ++p) {
    for (int i = 0; i < 8; ++i) {
      const float a_ip = __half2float(a[(row + i) * k + p]);
      for (int j = 0; j < 8; ++j) acc[i][j] += a_ip * __half2float(b[p * n + col + j]);
    }
  }
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) c[(row + i) * n + col + j] = __float2half(acc[i][j]);
}

void gemm_tiled(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const int m = a.size(0), k = a.size(1), n = b.size(1);
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  gemm_tiles<<<grid, dim3(16, 16), 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const half*>(a.data_ptr()), reinterpret_cast<const half*>(b.data_ptr()),
      reinterpret_cast<half*>(c.data_ptr()), n, k);
}
