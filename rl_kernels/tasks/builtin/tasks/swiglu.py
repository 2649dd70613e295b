import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU gate: y = silu(gate) * up, elementwise over two same-shape inputs."""

    def __init__(self):
        super().__init__()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


batch_size = 2048
dim = 2048


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_variant_inputs():
    return [[torch.randn(1000, 777), torch.randn(1000, 777)], [torch.randn(3, 129), torch.randn(3, 129)]]
