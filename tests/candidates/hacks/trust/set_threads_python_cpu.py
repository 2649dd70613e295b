# HACK a slower baseline through torch's thread pool (Python): torch.set_num_threads(1) in
# __init__, where torch calls are allowed, so the torch baseline re-timed in the same process runs
# on one core.  Rejected statically (monkeypatch); the worker also checks the thread count.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return out;
}
"""

ext = load_inline(name="trust_cpu_relu", cpp_sources=cpp_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        torch.set_num_threads(1)

    def forward(self, x):
        return ext.relu_forward(x)
