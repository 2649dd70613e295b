// Naive cpu hgemm candidate: the textbook triple loop, one dot product per element of C,
// fp32 accumulate, single thread. Correct for any M, N, K.
#include <torch/extension.h>

void hgemm_cpu_naive(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.options().dtype() == torch::kHalf && b.options().dtype() == torch::kHalf &&
                  c.options().dtype() == torch::kHalf,
              "hgemm_cpu_naive: a, b and c must be fp16");
  const long m = a.size(0);
  const long k = a.size(1);
  const long n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "hgemm_cpu_naive: shape mismatch");
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  for (long i = 0; i < m; ++i) {
    for (long j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (long p = 0; p < k; ++p) {
        acc += static_cast<float>(pa[i * k + p]) * static_cast<float>(pb[p * n + j]);
      }
      pc[i * n + j] = static_cast<_Float16>(acc);
    }
  }
}
