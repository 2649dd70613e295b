import torch
import torch.nn as nn


class Model(nn.Module):
    """Single matrix multiplication C = A @ B (square on the main shape)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


N = 1024


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []


def get_variant_inputs():
    return [
        [torch.randn(127, 93), torch.randn(93, 211)],
        [torch.randn(1, 300), torch.randn(300, 5)],
    ]
