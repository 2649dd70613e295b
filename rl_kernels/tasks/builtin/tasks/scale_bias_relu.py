import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused per-feature affine then ReLU: y = relu(x * scale + bias) over the last dim."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + self.bias)


batch_size = 4096
features = 1024


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]


def get_variant_inputs():
    return [[torch.randn(999, features)], [torch.randn(7, 33, features)]]
