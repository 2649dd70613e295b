// Does not compile: the build must fail with reason compile_error and return the compiler log.
#include <torch/extension.h>

void broken_entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  int x = this_symbol_does_not_exist;
}
