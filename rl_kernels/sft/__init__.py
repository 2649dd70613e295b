"""Supervised warm start: verified (prompt, answer) pairs from kernels people or earlier runs wrote.

`sources` reads the data, `examples` turns a verified kernel into the prompt the rollout would
send and the answer it should have produced.
"""
