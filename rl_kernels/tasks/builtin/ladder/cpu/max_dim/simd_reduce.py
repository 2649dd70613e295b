import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <vector>

// View x as (outer, n, inner): a vector max reduction per row when inner == 1, else row streaming.
torch::Tensor max_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    const int64_t nd = x.dim();
    const int64_t d = dim < 0 ? dim + nd : dim;
    TORCH_CHECK(d >= 0 && d < nd && x.size(d) > 0, "dim out of range or empty");
    int64_t outer = 1, inner = 1;
    std::vector<int64_t> out_sizes;
    for (int64_t i = 0; i < nd; ++i) {
        if (i < d) outer *= x.size(i);
        if (i > d) inner *= x.size(i);
        if (i != d) out_sizes.push_back(x.size(i));
    }
    const int64_t n = x.size(d);
    auto y = torch::empty(out_sizes, x.options());
    const float* __restrict in = x.data_ptr<float>();
    float* __restrict out = y.data_ptr<float>();
    for (int64_t o = 0; o < outer; ++o) {
        const float* __restrict src = in + o * n * inner;
        float* __restrict b = out + o * inner;
        if (inner == 1) {
            float m = src[0];
#pragma omp simd reduction(max : m)
            for (int64_t r = 1; r < n; ++r) m = src[r] > m ? src[r] : m;
            b[0] = m;
            continue;
        }
        for (int64_t i = 0; i < inner; ++i) b[i] = src[i];
        for (int64_t r = 1; r < n; ++r) {
#pragma omp simd
            for (int64_t i = 0; i < inner; ++i) b[i] = src[r * inner + i] > b[i] ? src[r * inner + i] : b[i];
        }
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_max_dim_cpu_simd_reduce",
    cpp_sources=cpp_source,
    functions=["max_dim_forward"],
    extra_cflags=["-O3", "-fopenmp-simd", "-fno-trapping-math"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.max_dim_forward(x.contiguous(), self.dim)
