import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean squared error between predictions and targets, reduced to a scalar."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


batch_size = 4096
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_variant_inputs():
    return [[torch.randn(999, 13), torch.randn(999, 13)], [torch.randn(7), torch.randn(7)]]
