import torch
import torch.nn as nn


class Model(nn.Module):
    """Max reduction over one dimension, returning the values only."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim).values


batch_size = 4096
reduce_size = 4096
dim = -1


def get_inputs():
    return [torch.randn(batch_size, reduce_size)]


def get_init_inputs():
    return [dim]


def get_variant_inputs():
    return [[torch.randn(333, 1001)], [torch.randn(7, 13, 257)]]
