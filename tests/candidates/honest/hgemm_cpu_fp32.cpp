// Honest hgemm (cpu backend, fp32 accumulate): blocked i-k-j loop over rows, one row per OpenMP
// iteration, partial sums in float, rounded to half once at the end.
#include <torch/extension.h>

#include <vector>

void hgemm_blocked(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.scalar_type() == torch::kHalf && b.scalar_type() == torch::kHalf, "fp16 inputs");
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "shape mismatch");
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  constexpr long kBlockK = 64;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < m; ++i) {
    std::vector<float> acc(n, 0.0f);
    for (long p0 = 0; p0 < k; p0 += kBlockK) {
      const long p1 = p0 + kBlockK < k ? p0 + kBlockK : k;
      for (long p = p0; p < p1; ++p) {
        const float a_ip = static_cast<float>(pa[i * k + p]);
        const _Float16* b_row = pb + p * n;
        for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(b_row[j]);
      }
    }
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
  }
}
