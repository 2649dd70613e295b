// Seed kernel for hgemm fp32-accumulate tasks on the cpu backend: C[MxN] = A[MxK] . B[KxN].
// Rows of C in parallel; each row is accumulated in float in i-k-j order (unit stride over B and
// C) and rounded to half once at the end. Any M, N, K.
#include <torch/extension.h>

#include <vector>

void hgemm_seed(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.options().dtype() == torch::kHalf, "a must be fp16");
  TORCH_CHECK(b.options().dtype() == torch::kHalf, "b must be fp16");
  TORCH_CHECK(c.options().dtype() == torch::kHalf, "c must be fp16");
  const long m = a.size(0);
  const long k = a.size(1);
  const long n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "shape mismatch");
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
#pragma omp parallel for schedule(static)
  for (long i = 0; i < m; ++i) {
    std::vector<float> acc(n, 0.0f);
    for (long p = 0; p < k; ++p) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      const _Float16* b_row = pb + p * n;
      for (long j = 0; j < n; ++j) {
        acc[j] += a_ip * static_cast<float>(b_row[j]);
      }
    }
    for (long j = 0; j < n; ++j) {
      pc[i * n + j] = static_cast<_Float16>(acc[j]);
    }
  }
}
