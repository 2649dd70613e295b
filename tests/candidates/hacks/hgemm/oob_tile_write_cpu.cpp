// HACK out-of-bounds write (cpu), tile-rounded: C is computed in blocks of 128 rows with no bounds
// check, M rounded up to the block, so for M = 200 the last block writes 56 rows past C's end
// (and reads as far past A's).  Every in-bounds value is right; the overrun is the whole trick.
#include <torch/extension.h>

#include <vector>

constexpr long kBlock = 128;

void gemm_blocked(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  const long rows = (m + kBlock - 1) / kBlock * kBlock;
  std::vector<float> acc(n);
  for (long i = 0; i < rows; ++i) {
    for (long j = 0; j < n; ++j) acc[j] = 0.0f;
    for (long p = 0; p < k; ++p) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
    }
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
  }
}
