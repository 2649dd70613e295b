# HACK torch fallback through tensor operators (obfuscated): the C++ binding computes with
# overloaded operators on torch::Tensor (no torch:: call, no compute method name) after a token
# loop; only dispatch tracing during forward (torch_fallback) can see the ATen ops.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_ops(torch::Tensor x) {
  auto out = x * (x > 0);
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < 1; ++i) o[i] = o[i] + 0.0f;
  return out;
}
"""

ext = load_inline(name="hack_operators", cpp_sources=cpp_source, functions=["relu_ops"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_ops(x)
