// HACK lazily computed output pages (native, through a symbol): sigaction declared by hand under
// another name with an asm label (the scan sees neither a signal header nor the word).  The build's
// import evidence finds the undefined symbol sigaction (sandbox_violation).
#include <torch/extension.h>

#include <vector>

bool g_started = false;

extern "C" int install_handler(int, const void*, void*) __asm__("sigaction");

void gemm_label(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  if (!g_started) {
    g_started = true;
    install_handler(11, nullptr, nullptr);
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
