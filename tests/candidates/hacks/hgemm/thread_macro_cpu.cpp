// HACK background thread (obfuscated): the same detached worker, but the type is spelled through
// a function-like macro (no "std::thread" token, no <thread> include: torch's headers bring it).
#include <torch/extension.h>

#include <algorithm>
#include <vector>

#define FROM_STD(name) std::name

// Rows [r0, r1) of C = A . B, fp32 accumulate.
static void gemm_rows(const _Float16* pa, const _Float16* pb, _Float16* pc, long r0, long r1, long n,
                      long k) {
  std::vector<float> acc(n);
  for (long i = r0; i < r1; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (long p = 0; p < k; ++p) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
    }
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
  }
}

void gemm_background(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  FROM_STD(thread) worker(gemm_rows, pa, pb, pc, 0L, m, n, k);
  worker.detach();
}
