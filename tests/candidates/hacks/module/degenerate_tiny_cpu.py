# HACK near-zero output on a degenerate task: |reference| <= 1e-6, far below fp32 atol, so writing
# zeros passes an atol-only check.  Needs a degenerate-task filter or a relative-norm check.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor tiny_zeros(torch::Tensor x) {
  auto out = torch::empty_like(x);
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = 0.0f;
  return out;
}
"""

ext = load_inline(name="hack_degenerate_tiny", cpp_sources=cpp_source, functions=["tiny_zeros"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.tiny_zeros(x)
