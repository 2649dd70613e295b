// Raises a C++ exception with a message: reported as runtime_error, message kept.
#include <torch/extension.h>

void throw_entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.size(0) < 0, "this kernel refuses to run: M=", a.size(0));
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  for (long i = 0; i < c.size(0) * c.size(1); ++i) pc[i] = 0;
}
