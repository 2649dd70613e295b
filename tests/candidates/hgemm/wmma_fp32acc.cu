// Tensor-core hgemm candidate via nvcuda::wmma (16x16x16 fragments), fp32 accumulate.
// A block of 4 warps computes a 64x64 tile of C, each warp a 32x32 quarter (2x2 fragments).
// Fragments load straight from global memory: A as a row-major matrix_a (ld K) and B from
// b_col_major as a col-major matrix_b (B^T contiguous, ld K). The fp32 accumulators go through a
// per-warp shared-memory patch to be rounded to half and stored with bounds checks.
// Assumptions (checked on entry): M, N, K multiples of 16 (every CUDA-L2 grid shape is).
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int kFrag = 16;
constexpr int kWarpTile = 32;               // each warp: 2x2 fragments
constexpr int kBlockTile = 2 * kWarpTile;   // 2x2 warps
constexpr int kThreads = 4 * 32;

__global__ void __launch_bounds__(kThreads)
hgemm_wmma_kernel(const __half* __restrict__ a, const __half* __restrict__ bt, __half* __restrict__ c,
                  int m, int n, int k) {
  __shared__ float patch[4][kFrag * kFrag];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row0 = blockIdx.y * kBlockTile + (warp / 2) * kWarpTile;
  const int col0 = blockIdx.x * kBlockTile + (warp % 2) * kWarpTile;
  if (row0 >= m || col0 >= n) return;  // whole warp idles; no block-wide barrier below

  wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int p = 0; p < k; p += kFrag) {
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> fa[2];
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major> fb[2];
    for (int i = 0; i < 2; ++i) {
      const int r = min(row0 + i * kFrag, m - kFrag);  // clamped loads; stores are masked
      wmma::load_matrix_sync(fa[i], a + (size_t)r * k + p, k);
    }
    for (int j = 0; j < 2; ++j) {
      const int col = min(col0 + j * kFrag, n - kFrag);
      wmma::load_matrix_sync(fb[j], bt + (size_t)col * k + p, k);
    }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
  }

  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      const int r0 = row0 + i * kFrag, c0 = col0 + j * kFrag;
      if (r0 >= m || c0 >= n) continue;  // uniform across the warp
      wmma::store_matrix_sync(patch[warp], acc[i][j], kFrag, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < kFrag * kFrag; e += 32) {
        c[(size_t)(r0 + e / kFrag) * n + c0 + e % kFrag] = __float2half(patch[warp][e]);
      }
      __syncwarp();
    }
  }
}

}  // namespace

void hgemm_wmma(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.options().dtype() == torch::kHalf && b_col_major.options().dtype() == torch::kHalf &&
                  c.options().dtype() == torch::kHalf,
              "hgemm_wmma: a, b_col_major and c must be fp16");
  const int m = a.size(0);
  const int k = a.size(1);
  const int n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "hgemm_wmma: shape mismatch");
  TORCH_CHECK(m % kFrag == 0 && n % kFrag == 0 && k % kFrag == 0,
              "hgemm_wmma: needs M, N and K to be multiples of 16");
  const dim3 grid((n + kBlockTile - 1) / kBlockTile, (m + kBlockTile - 1) / kBlockTile);
  hgemm_wmma_kernel<<<grid, kThreads>>>(reinterpret_cast<const __half*>(a.data_ptr()),
                                        reinterpret_cast<const __half*>(b_col_major.data_ptr()),
                                        reinterpret_cast<__half*>(c.data_ptr()), m, n, k);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "hgemm_wmma: kernel launch failed");
}
