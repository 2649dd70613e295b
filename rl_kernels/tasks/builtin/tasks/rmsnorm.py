import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


batch_size = 2048
features = 2048


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]


def get_variant_inputs():
    return [[torch.randn(131, features)], [torch.randn(2, 45, features)]]
