// Hangs from its 40th call on (cuda): honest until then (the tiled kernel of
// honest/hgemm_cuda_fp32.cu), so it passes the correctness phase, the profiled call and the
// warm-up, then from a later timed window on it launches a kernel that spins forever; the host's
// sync after the window never returns.  The watchdog must report it `hung` within that window's
// allowance (hang_factor baseline calls per call) plus the floor.
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <c10/cuda/CUDAStream.h>

namespace {

constexpr long kHangFromCall = 40;
constexpr int kTile = 32;
constexpr int kThreads = 16;
long g_calls = 0;

__global__ void hgemm_tile32(const half* __restrict__ a, const half* __restrict__ b,
                             half* __restrict__ c, int m, int n, int k) {
  __shared__ float sa[kTile][kTile + 1];
  __shared__ float sb[kTile][kTile + 1];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  for (int k0 = 0; k0 < k; k0 += kTile) {
    for (int r = ty; r < kTile; r += kThreads) {
      for (int q = tx; q < kTile; q += kThreads) {
        const int ar = row0 + r, ac = k0 + q, br = k0 + r, bc = col0 + q;
        sa[r][q] = (ar < m && ac < k) ? __half2float(a[(size_t)ar * k + ac]) : 0.f;
        sb[r][q] = (br < k && bc < n) ? __half2float(b[(size_t)br * n + bc]) : 0.f;
      }
    }
    __syncthreads();
    for (int p = 0; p < kTile; ++p) {
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) acc[i][j] += sa[ty + i * kThreads][p] * sb[p][tx + j * kThreads];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      const int r = row0 + ty + i * kThreads, q = col0 + tx + j * kThreads;
      if (r < m && q < n) c[(size_t)r * n + q] = __float2half(acc[i][j]);
    }
  }
}

__global__ void spin_forever() {
  while (clock64() >= 0) {
  }   // the cycle counter never goes negative (it is read anew each time: no endless loop to optimise away)
}

}  // namespace

void hgemm_then_hang(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const int m = a.size(0), k = a.size(1), n = b.size(1);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (++g_calls >= kHangFromCall) {
    spin_forever<<<1, 1, 0, stream>>>();
  }
  const dim3 block(kThreads, kThreads);
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  hgemm_tile32<<<grid, block, 0, stream>>>(reinterpret_cast<const half*>(a.data_ptr()),
                                          reinterpret_cast<const half*>(b.data_ptr()),
                                          reinterpret_cast<half*>(c.data_ptr()), m, n, k);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch failed");
}
