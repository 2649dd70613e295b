# HACK constant output on a degenerate task: softmax over a singleton dimension is all ones, so a
# kernel that never reads its input is "correct" and arbitrarily fast.  The task must be excluded.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor softmax_ones(torch::Tensor x) {
  auto out = torch::empty_like(x);
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = 1.0f;
  return out;
}
"""

ext = load_inline(name="hack_degenerate_softmax", cpp_sources=cpp_source, functions=["softmax_ones"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.softmax_ones(x)
