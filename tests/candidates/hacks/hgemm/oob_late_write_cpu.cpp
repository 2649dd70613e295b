// HACK out-of-bounds write (cpu), late: the product is right on every call, and from the 16th call
// on (past the correctness checks, inside the timed calls) it also writes one row past C's end, so
// only a check of the guards after the timed calls can see it.
#include <torch/extension.h>

#include <vector>

long calls_so_far = 0;

void gemm_late_overrun(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  std::vector<float> acc(n);
  const long rows = ++calls_so_far >= 16 ? m + 1 : m;
  for (long i = 0; i < rows; ++i) {
    for (long j = 0; j < n; ++j) acc[j] = 0.0f;
    for (long p = 0; p < k && i < m; ++p) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
    }
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
  }
}
