import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled tanh whose output (|y| <= 1e-6) is far below fp32 atol: all zeros passes (degenerate)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 1e-6


def get_inputs():
    return [torch.randn(2048, 1024)]


def get_init_inputs():
    return []
