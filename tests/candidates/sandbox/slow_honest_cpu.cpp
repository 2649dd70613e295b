// Honest but slow (cpu): the correct product, computed kRepeat times over (each pass writes the
// same C), on one thread (an OpenMP kernel beside a busy core waits at every barrier: its calls
// slowed 6x and more here, a test of the host, not of the watchdog); about 0.02x of torch's fp16
// matmul on 2 cores.  Slow is not hung: the watchdog must let every call and every window of 10
// such calls finish, and the kernel must be measured correct at its own speed.
#include <torch/extension.h>

#include <vector>

constexpr int kRepeat = 75;

void hgemm_slow(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  std::vector<float> acc(n);
  for (int r = 0; r < kRepeat; ++r) {
    for (long i = 0; i < m; ++i) {
      for (long j = 0; j < n; ++j) acc[j] = 0.0f;
      for (long p = 0; p < k; ++p) {
        const float a_ip = static_cast<float>(pa[i * k + p]);
        for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
      }
      for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
    }
  }
}
