import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <vector>

// View x as (outer, n, inner); stream each (n, inner) slab row by row into inner accumulators.
torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous float32");
    const int64_t nd = x.dim();
    const int64_t d = dim < 0 ? dim + nd : dim;
    TORCH_CHECK(d >= 0 && d < nd, "dim out of range");
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
    std::vector<double> acc(inner);
    double* __restrict a = acc.data();
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) a[i] = 0.0;
        for (int64_t r = 0; r < n; ++r) {
            const float* __restrict row = in + (o * n + r) * inner;
#pragma omp simd
            for (int64_t i = 0; i < inner; ++i) a[i] += row[i];
        }
        for (int64_t i = 0; i < inner; ++i) out[o * inner + i] = static_cast<float>(a[i]);
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_sum_dim_cpu_row_accumulate",
    cpp_sources=cpp_source,
    functions=["sum_dim_forward"],
    extra_cflags=["-O3", "-fopenmp-simd"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.sum_dim_forward(x.contiguous(), self.dim)
