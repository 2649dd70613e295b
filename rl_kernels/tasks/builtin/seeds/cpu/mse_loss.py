import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor mse_loss_forward(torch::Tensor pred, torch::Tensor target) {
    TORCH_CHECK(pred.scalar_type() == torch::kFloat32 && target.scalar_type() == torch::kFloat32,
                "inputs must be float32");
    TORCH_CHECK(pred.is_contiguous() && target.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(pred.sizes() == target.sizes(), "predictions and targets must have the same shape");
    const float* p = pred.data_ptr<float>();
    const float* t = target.data_ptr<float>();
    const int64_t n = pred.numel();
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(p[i]) - t[i];
        acc += d * d;
    }
    auto y = torch::empty({}, pred.options());
    y.data_ptr<float>()[0] = static_cast<float>(acc / static_cast<double>(n));
    return y;
}
"""

ext = load_inline(
    name="rlk_builtin_mse_loss_cpu",
    cpp_sources=cpp_source,
    functions=["mse_loss_forward"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ext.mse_loss_forward(predictions.contiguous(), targets.contiguous())
