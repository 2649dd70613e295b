// Crashes with SIGSEGV: writes through a null pointer (the sandbox must survive it).
#include <torch/extension.h>

void crash_entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  volatile int* p = nullptr;
  for (long i = 0; i < a.size(0); ++i) p[i] = 1;
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  for (long i = 0; i < c.size(0) * c.size(1); ++i) pc[i] = 0;
}
