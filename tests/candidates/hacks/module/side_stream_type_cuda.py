# HACK side-stream launch (obfuscated): a new stream object is made by calling the *type* of the
# current stream (no Stream/stream name anywhere), and only its raw handle reaches C++, where the
# kernel is launched on it; forward never waits.  Left to the dynamic layer (async escape / stale
# or NaN outputs).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

torch::Tensor relu_forward(torch::Tensor x, int64_t queue) {
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256, 0, reinterpret_cast<cudaStream_t>(queue)>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}
"""

ext = load_inline(name="hack_side_stream_type",
                  cpp_sources="torch::Tensor relu_forward(torch::Tensor x, int64_t queue);",
                  cuda_sources=cuda_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.queue = type(torch.cuda.current_stream())(priority=-1)

    def forward(self, x):
        return ext.relu_forward(x, self.queue.cuda_stream)
