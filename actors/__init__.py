"""Thin Ray actors wrapping rl_kernels (generator, compile pool, timer, replay buffer): issue 3."""
