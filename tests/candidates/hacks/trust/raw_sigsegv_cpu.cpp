// HACK lazily computed output pages (native): installs a SIGSEGV handler through a raw
// rt_sigaction (syscall instruction spelled as bytes), the first step of handing back output pages
// that are computed only when the checker touches them.  The seccomp filter kills the worker at
// the rt_sigaction (sandbox_violation).
#include <torch/extension.h>

#include <vector>

struct kernel_sigaction_t {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)(void);
  unsigned long mask;
};

inline void on_fault(int) {}

void gemm_lazy(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  kernel_sigaction_t act{on_fault, 0x04000000UL, nullptr, 0};   // SA_RESTORER unset
  long ret;
  register long size __asm__("r10") = 8;
  __asm__ volatile(".byte 0x0f, 0x05" : "=a"(ret) : "a"(13L), "D"(11L), "S"(&act), "d"(0L), "r"(size)
                   : "rcx", "r11", "memory");
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
