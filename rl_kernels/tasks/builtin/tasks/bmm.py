import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiplication: C[b] = A[b] @ B[b]."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


batch = 32
m = 256
k = 128
n = 256


def get_inputs():
    return [torch.randn(batch, m, k), torch.randn(batch, k, n)]


def get_init_inputs():
    return []


def get_variant_inputs():
    return [
        [torch.randn(3, 65, 17), torch.randn(3, 17, 129)],
        [torch.randn(1, 1, 7), torch.randn(1, 7, 1)],
    ]
