"""Whether an exported kernel works inside a CUDA graph, found out by trying it in a child process.

A kernel may be correct when called eagerly and still break a capture: it allocates or frees
device memory per call (CUTLASS's workspace), synchronises, or launches on the legacy default
stream.  Such a failure can leave the CUDA context unusable, so each kernel is probed in a process
of its own, and the op only takes the kernel path under capture for kernels whose probe passed
(`capturable` in the manifest; the others run torch.matmul while a graph is captured).

The probe, on random fp16 inputs of the kernel's shape:
1. the kernel on torch's default stream, then on a side stream: the same product both times (the
   side stream is where a capture runs, and where a caller's work must stay ordered);
2. one call captured into a `torch.cuda.CUDAGraph`, then the graph replayed on new input values
   copied into the captured buffers: the replay must give the eager product of the new values
   (a graph that replays stale results, or none, is not a capture that works).

    python -m rl_kernels.ops.capture KERNEL.so M N K     # prints one JSON line {capturable, detail}
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from rl_kernels.ops.runtime import load_hgemm_entry, relative_gap

_TOLERANCE = 1e-2   # relative-norm difference between two runs of one kernel on the same inputs


def probe(so: Path, m: int, n: int, k: int) -> dict[str, Any]:
    """Runs the probe in this process (see the module docstring); {capturable, detail}."""
    entry = load_hgemm_entry(so)
    gen = torch.Generator(device="cuda").manual_seed(m * 131 + n * 7 + k)
    a = torch.randn((m, k), generator=gen, device="cuda").half()
    b = torch.randn((k, n), generator=gen, device="cuda").half()
    c = torch.empty((m, n), dtype=torch.float16, device="cuda")

    def call() -> None:
        entry(a, b, b.t().contiguous().view(k, n), c)

    call()
    torch.cuda.synchronize()
    on_default = c.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c.zero_()
        call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    gap = relative_gap(c, on_default)
    if gap > _TOLERANCE:
        return {"capturable": False, "detail": f"on a side stream the product differs from the default stream's "
                                               f"(relative-norm gap {gap:.3g}): not ordered with its caller"}
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            call()
    except Exception as exc:   # the capture itself failed: the kernel did something a graph cannot hold
        return {"capturable": False, "detail": f"capture failed: {_first_line(exc)}"}
    a.copy_(torch.randn((m, k), generator=gen, device="cuda").half())
    b.copy_(torch.randn((k, n), generator=gen, device="cuda").half())
    c.zero_()
    graph.replay()
    torch.cuda.synchronize()
    replayed = c.clone()
    call()
    torch.cuda.synchronize()
    gap = relative_gap(replayed, c)
    if gap > _TOLERANCE:
        return {"capturable": False, "detail": f"the replay does not compute the eager product of new inputs "
                                               f"(relative-norm gap {gap:.3g})"}
    return {"capturable": True, "detail": f"captured and replayed on new inputs (gap {gap:.2g} to eager)"}


def probe_in_child(so: Path, m: int, n: int, k: int, timeout_s: float) -> dict[str, Any]:
    """`probe` in a fresh interpreter: a capture that breaks the context breaks only that process."""
    cmd = [sys.executable, "-m", "rl_kernels.ops.capture", str(so), str(m), str(n), str(k)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"capturable": False, "detail": f"the probe did not finish in {timeout_s:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"capturable": False, "detail": f"the probe process failed (exit {done.returncode}): {tail[:300]}"}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def main(argv: list[str]) -> int:
    so, m, n, k = Path(argv[0]), *(int(x) for x in argv[1:4])
    try:
        result = probe(so, m, n, k)
    except Exception as exc:   # the eager calls failed: report it as the verdict, not as a crash
        result = {"capturable": False, "detail": f"the kernel failed outside any capture: {_first_line(exc)}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
