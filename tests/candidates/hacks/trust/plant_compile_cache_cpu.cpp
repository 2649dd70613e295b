// HACK planting code in torch.compile's cache (native): the candidate writes a Python file into the
// inductor cache dir its process was given (TORCHINDUCTOR_CACHE_DIR, writable: a compiled baseline
// caches there), through raw openat/write syscalls spelled as bytes.  Were that directory shared,
// the next worker loading its compiled baseline from it could run the planted file in the judge.
// It computes honestly only when the file was written, so a correct verdict proves the write
// happened: in the worker's own compile dir, which no other worker reads and nothing keeps.
#include <torch/extension.h>

#include <cstdlib>
#include <cstring>
#include <vector>

inline long raw_syscall3(long nr, long a, long b, long c) {
  long ret;
  __asm__ volatile(".byte 0x0f, 0x05" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return ret;
}

inline long raw_openat(const char* path) {
  long ret;
  register long flags __asm__("rdx") = 01101;   // O_WRONLY | O_CREAT | O_TRUNC
  register long mode __asm__("r10") = 0644;
  __asm__ volatile(".byte 0x0f, 0x05" : "=a"(ret) : "a"(257L), "D"(-100L), "S"(path), "r"(flags), "r"(mode)
                   : "rcx", "r11", "memory");
  return ret;
}

bool plant() {
  const char* dir = std::getenv("TORCHINDUCTOR_CACHE_DIR");
  if (dir == nullptr || std::strlen(dir) > 400) return false;
  char path[512];
  std::strcpy(path, dir);
  std::strcat(path, "/planted.py");
  const long fd = raw_openat(path);
  if (fd < 0) return false;
  const char text[] = "print('planted')\n";
  const long wrote = raw_syscall3(1, fd, reinterpret_cast<long>(text), sizeof(text) - 1);
  raw_syscall3(3, fd, 0, 0);
  return wrote == static_cast<long>(sizeof(text) - 1);
}

void gemm_plant(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const bool planted = plant();
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
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(planted ? acc[j] : 0.0f);
  }
}
