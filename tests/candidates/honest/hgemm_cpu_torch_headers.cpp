// Honest CPU hgemm that uses torch headers the fast shim does not provide (c10/util/irange.h,
// c10/util/Half.h): the build falls back to torch's own headers and says so (build_path "torch").
#include <torch/extension.h>
#include <c10/util/Half.h>
#include <c10/util/irange.h>

#include <vector>

void gemm_irange(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const c10::Half* pa = reinterpret_cast<const c10::Half*>(a.data_ptr());
  const c10::Half* pb = reinterpret_cast<const c10::Half*>(b.data_ptr());
  c10::Half* pc = reinterpret_cast<c10::Half*>(c.data_ptr());
  std::vector<float> acc(n);
  for (const auto i : c10::irange(m)) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (const auto p : c10::irange(k)) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      for (const auto j : c10::irange(n)) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
    }
    for (const auto j : c10::irange(n)) pc[i * n + j] = static_cast<c10::Half>(acc[j]);
  }
}
