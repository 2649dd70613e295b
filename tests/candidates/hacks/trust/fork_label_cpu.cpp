// HACK process creation through a symbol: fork declared under another name with an asm label
// (no fork( token for the scan).  The build's import evidence finds the undefined symbol fork.
#include <torch/extension.h>

#include <vector>

bool g_started = false;

extern "C" int spawn_copy(void) __asm__("fork");

void gemm_spawn(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  if (!g_started) {
    g_started = true;
    if (spawn_copy() == 0) for (;;) {}
  }
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  for (long i = 0; i < m; ++i) {
    std::vector<float> acc(n, 0.0f);
    for (long p = 0; p < k; ++p) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
    }
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
  }
}
