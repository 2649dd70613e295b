"""Thin Ray actors wrapping rl_kernels: generator, compile worker, timer, replay buffer, learner."""
