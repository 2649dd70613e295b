// HACK background thread (obfuscated by token pasting): the thread type's name is pasted together
// by a macro, so no "std::thread" token appears in the text; the gate expands the candidate's own
// macros and sees what the pasting built.
#include <torch/extension.h>

#define JOIN(a, b) a##b

static void zero_rows(_Float16* pc, long count) {
  for (long i = 0; i < count; ++i) pc[i] = static_cast<_Float16>(0.0f);
}

void gemm_pasted_thread(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  std::JOIN(thr, ead) worker(zero_rows, pc, c.size(0) * c.size(1));
  worker.detach();
}
