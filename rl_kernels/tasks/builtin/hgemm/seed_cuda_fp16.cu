// Seed kernel for hgemm fp16-accumulate tasks: C[MxN] = A[MxK] . B[KxN], fp16 in/out.
// Shared-memory tiling (16x16 tiles of A and B staged per step of K), one thread per output,
// accumulating in __half with a fused multiply-add, so every partial sum is rounded to half as
// fp16-accumulate tensor-core MMAs do. Bounds-checked, so any M, N, K.
#include <torch/extension.h>
#include <cuda_fp16.h>

namespace {

constexpr int kTile = 16;

__global__ void hgemm_tiled_fp16acc(const __half* __restrict__ a, const __half* __restrict__ b,
                                    __half* __restrict__ c, int m, int n, int k) {
  __shared__ __half a_tile[kTile][kTile];
  __shared__ __half b_tile[kTile][kTile];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  const __half zero = __float2half(0.0f);
  __half acc = zero;
  for (int k0 = 0; k0 < k; k0 += kTile) {
    const int a_col = k0 + threadIdx.x;
    const int b_row = k0 + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] = (row < m && a_col < k) ? a[(size_t)row * k + a_col] : zero;
    b_tile[threadIdx.y][threadIdx.x] = (b_row < k && col < n) ? b[(size_t)b_row * n + col] : zero;
    __syncthreads();
    for (int i = 0; i < kTile; ++i) {
      acc = __hfma(a_tile[threadIdx.y][i], b_tile[i][threadIdx.x], acc);
    }
    __syncthreads();
  }
  if (row < m && col < n) {
    c[(size_t)row * n + col] = acc;
  }
}

}  // namespace

void hgemm_seed(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.options().dtype() == torch::kHalf, "a must be fp16");
  TORCH_CHECK(b.options().dtype() == torch::kHalf, "b must be fp16");
  TORCH_CHECK(c.options().dtype() == torch::kHalf, "c must be fp16");
  const int m = a.size(0);
  const int k = a.size(1);
  const int n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "shape mismatch");
  const dim3 block(kTile, kTile);
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  hgemm_tiled_fp16acc<<<grid, block>>>(reinterpret_cast<const __half*>(a.data_ptr()),
                                       reinterpret_cast<const __half*>(b.data_ptr()),
                                       reinterpret_cast<__half*>(c.data_ptr()), m, n, k);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "hgemm seed kernel launch failed");
}
