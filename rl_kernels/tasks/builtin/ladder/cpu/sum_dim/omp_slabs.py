import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <vector>

// View x as (outer, n, inner); threads split (outer x 256-column chunks), each streams its rows.
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
    const int64_t n = x.size(d), nchunk = (inner + 255) / 256;
    auto y = torch::empty(out_sizes, x.options());
    const float* __restrict in = x.data_ptr<float>();
    float* __restrict out = y.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < outer * nchunk; ++t) {
        const int64_t o = t / nchunk, i0 = (t % nchunk) * 256;
        const int64_t w = inner - i0 < 256 ? inner - i0 : 256;
        double a[256];
        for (int64_t i = 0; i < w; ++i) a[i] = 0.0;
        for (int64_t r = 0; r < n; ++r) {
            const float* __restrict row = in + (o * n + r) * inner + i0;
#pragma omp simd
            for (int64_t i = 0; i < w; ++i) a[i] += row[i];
        }
        for (int64_t i = 0; i < w; ++i) out[o * inner + i0 + i] = static_cast<float>(a[i]);
    }
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_sum_dim_cpu_omp_slabs",
    cpp_sources=cpp_source,
    functions=["sum_dim_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.sum_dim_forward(x.contiguous(), self.dim)
