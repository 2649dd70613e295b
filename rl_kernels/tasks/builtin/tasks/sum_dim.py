import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum reduction over one dimension (the dimension is removed)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)


batch_size = 128
reduce_size = 2048
inner = 64
dim = 1


def get_inputs():
    return [torch.randn(batch_size, reduce_size, inner)]


def get_init_inputs():
    return [dim]


def get_variant_inputs():
    return [[torch.randn(13, 777, 31)], [torch.randn(5, 3, 1)]]
