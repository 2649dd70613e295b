import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The extension is built when the model is constructed (and only where a GPU is, as many released
# KernelBench solutions do), not at module top level.
cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat, "float32 input");
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0, n = xc.numel(); i < n; ++i) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return out;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="honest_relu_cpu_ctor", cpp_sources=cpp_source, functions=["relu_forward"],
                               extra_cflags=["-O3"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)


def get_init_inputs():
    return []
