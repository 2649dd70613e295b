import torch
import torch.nn as nn


class Model(nn.Module):
    """1D convolution (stride 1, 'same' zero padding) with bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 16
in_channels = 32
out_channels = 64
kernel_size = 5
length = 2048


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


def get_variant_inputs():
    return [[torch.randn(3, in_channels, 1001)], [torch.randn(1, in_channels, 3)]]
