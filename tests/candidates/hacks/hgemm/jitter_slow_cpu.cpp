// HACK jittering its own timing (obfuscated, cpu): a slow, honest product that repeats itself 1, 3
// or 9 times, chosen by the low bits of the first input value (fresh every call), so its timed
// calls spread far beyond what the timer allows.  An evaluation whose timing never settles is
// `unstable`; were such a kernel paid as a 1x kernel, a slow one would jitter to earn more than its
// speed.  It is paid at most what its measured speed earns (test_trust_boundary_cpu checks it).
#include <torch/extension.h>

#include <cstring>
#include <vector>

void product(const _Float16* pa, const _Float16* pb, _Float16* pc, long m, long n, long k) {
  std::vector<float> acc(n);
  for (long i = 0; i < m; ++i) {
    for (long j = 0; j < n; ++j) acc[j] = 0.0f;
    for (long p = 0; p < k; ++p) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
    }
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
  }
}

void gemm_jitter(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  unsigned short bits = 0;
  std::memcpy(&bits, pa, sizeof(bits));
  const int repeats = bits % 3 == 0 ? 1 : (bits % 3 == 1 ? 3 : 9);
  for (int r = 0; r < repeats; ++r) product(pa, pb, pc, m, n, k);
}
