"""rl_kernels: train language models with RL to write fast, correct GPU kernels (see DESIGN.md)."""

__version__ = "0.1.0"
