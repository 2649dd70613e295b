import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Fused chain: linear layer, exact GELU, multiply by a constant scale."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x)) * self.scale


batch_size = 1024
in_features = 1024
out_features = 1024
scale = 1.7


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]


def get_variant_inputs():
    return [[torch.randn(33, in_features)], [torch.randn(5, 7, in_features)]]
