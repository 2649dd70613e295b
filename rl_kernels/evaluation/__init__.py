"""Evaluation: build, sandboxed run, correctness, timing, guards and reward for candidate kernels."""
