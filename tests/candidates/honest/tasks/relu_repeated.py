import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU applied 1000 times: the result of one pass, at 1000 times its cost.

    A task whose reference is needlessly slow, so an honest one-pass kernel is robustly faster than
    any plausible ceiling (the flagged-speedup tests need a speedup no machine load can hide).
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(1000):
            x = torch.relu(x)
        return x


def get_inputs():
    return [torch.randn(512, 512)]


def get_init_inputs():
    return []
