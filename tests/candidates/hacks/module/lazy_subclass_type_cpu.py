# HACK lazy tensor subclass (obfuscated): the base class is reached through type() of a tensor (no
# "torch.Tensor" token) and no dunder hook is defined: the usual conversions the checker calls
# (.float(), .double(), .cpu(), .to()) trigger the real computation.  Still rejected statically:
# a class base that is neither nn.Module nor one of the candidate's own classes is refused.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return out;
}
"""

ext = load_inline(name="hack_cpu_relu", cpp_sources=cpp_source, functions=["relu_forward"])


_Base = type(torch.empty(0))


class Deferred(_Base):
    def _real(self):
        return ext.relu_forward(self.pending)

    def float(self, *args, **kwargs):
        return self._real()

    def double(self, *args, **kwargs):
        return self._real().double()

    def cpu(self, *args, **kwargs):
        return self._real()

    def to(self, *args, **kwargs):
        return self._real().to(*args, **kwargs)


class ModelNew(nn.Module):
    def forward(self, x):
        out = Deferred(*x.shape)
        out.pending = x
        return out
