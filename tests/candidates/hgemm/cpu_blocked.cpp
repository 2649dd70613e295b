// Cache-blocked cpu hgemm candidate, fp32 accumulate. C is split into 64-row x 256-column blocks
// handed to OpenMP threads; each block keeps a float accumulator that stays in L1/L2 while K is
// walked in chunks of 256, with a float copy of the B panel so the inner loop is a unit-stride
// float multiply-add the compiler vectorises. Correct for any M, N, K.
#include <torch/extension.h>

#include <algorithm>
#include <vector>

namespace {

constexpr long kBM = 64;
constexpr long kBN = 256;
constexpr long kBK = 256;

void block(const _Float16* pa, const _Float16* pb, _Float16* pc, long n, long k, long i0, long i1, long j0,
           long j1) {
  const long w = j1 - j0;
  std::vector<float> acc((i1 - i0) * w, 0.0f);
  std::vector<float> panel(kBK * w);
  for (long p0 = 0; p0 < k; p0 += kBK) {
    const long p1 = std::min(p0 + kBK, k);
    for (long p = p0; p < p1; ++p)
      for (long j = 0; j < w; ++j) panel[(p - p0) * w + j] = static_cast<float>(pb[p * n + j0 + j]);
    for (long i = i0; i < i1; ++i) {
      float* acc_row = &acc[(i - i0) * w];
      for (long p = p0; p < p1; ++p) {
        const float a_ip = static_cast<float>(pa[i * k + p]);
        const float* b_row = &panel[(p - p0) * w];
        for (long j = 0; j < w; ++j) acc_row[j] += a_ip * b_row[j];
      }
    }
  }
  for (long i = i0; i < i1; ++i)
    for (long j = 0; j < w; ++j) pc[i * n + j0 + j] = static_cast<_Float16>(acc[(i - i0) * w + j]);
}

}  // namespace

void hgemm_cpu_blocked(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.options().dtype() == torch::kHalf && b.options().dtype() == torch::kHalf &&
                  c.options().dtype() == torch::kHalf,
              "hgemm_cpu_blocked: a, b and c must be fp16");
  const long m = a.size(0);
  const long k = a.size(1);
  const long n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "hgemm_cpu_blocked: shape mismatch");
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  const long row_blocks = (m + kBM - 1) / kBM;
  const long col_blocks = (n + kBN - 1) / kBN;
#pragma omp parallel for collapse(2) schedule(static)
  for (long bi = 0; bi < row_blocks; ++bi) {
    for (long bj = 0; bj < col_blocks; ++bj) {
      block(pa, pb, pc, n, k, bi * kBM, std::min((bi + 1) * kBM, m), bj * kBN, std::min((bj + 1) * kBN, n));
    }
  }
}
