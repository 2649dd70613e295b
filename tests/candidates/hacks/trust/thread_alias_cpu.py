# HACK a native thread that slows the baseline (obfuscated): `namespace s = std;` hides std::thread
# from the scan; the detached thread would spin a core while the baseline, re-timed in the same
# process, runs.  The build's import evidence finds std::thread::_M_start_thread (thread_spawn).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
namespace s = std;

bool g_spinning = false;

torch::Tensor relu_forward(torch::Tensor x) {
  if (!g_spinning) {
    g_spinning = true;
    s::thread([] { volatile unsigned long n = 0; for (;;) n = n + 1; }).detach();
  }
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return out;
}
"""

ext = load_inline(name="trust_thread_alias", cpp_sources=cpp_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)
