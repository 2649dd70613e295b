// Hangs from its 25th call on (cpu): honest until then, so it passes the correctness phase (7
// calls) and the warm-up and first timed window of the timing phase, then one call of a later
// timed window spins forever.  The watchdog must report it `hung` within that window's allowance
// (hang_factor baseline calls per call in the window) plus the floor, not the job's wall limit.
// The spin reads a volatile so the compiler cannot assume it ends.
#include <torch/extension.h>

#include <vector>

constexpr long kHangFromCall = 25;
long g_calls = 0;
volatile long g_spin = 0;

void hgemm_then_hang(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  if (++g_calls >= kHangFromCall) {
    for (;;) g_spin = g_spin + 1;
  }
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
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
