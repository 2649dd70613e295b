"""What a loaded host does to a kernel's reward, and whether the baseline record catches it.

    python benchmarks/host_load.py --config configs/local.yaml --backend cpu --repeats 4 \\
        [--tasks builtin/rmsnorm,builtin/softmax] [--load 2] [--burner spin|stream] [--nice 19] \\
        [--cores 0,1] [--out load.json] [overrides]

Each task's own seed is built once, then evaluated `--repeats` times in three phases: `idle`,
`loaded` (`--load` burner processes at `--nice` run beside the evaluations, pinned to `--cores`,
default every core this process may use: `spin` is a busy loop, `stream` copies 128 MiB arrays, a
memory-bandwidth load like a test run's builds and torch work) and `idle-after`. One evaluator per
task for the whole run, so the baseline record (`eval.reward.baseline_drift`) built in the idle
phase is the reference of the loaded one. Prints one row per task x phase: speedups, the
baseline's medians, the record's reference, the largest drift, how many evaluations were
re-measured and how many were reported `baseline_drift`, and the mean reward. Use a fresh
`eval.build.cache_dir` to start from an empty record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.evaluation.build import build_many  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402
from rl_kernels.types import Measurement  # noqa: E402

BURNERS = {
    "spin": "while True: pass",
    "stream": ("import torch\ntorch.set_num_threads(1)\na = torch.empty(1 << 25)\nb = torch.ones(1 << 25)\n"
               "while True: a.copy_(b)"),
}


@contextlib.contextmanager
def burners(count: int, kind: str, nice: int, cores: set[int]) -> Iterator[None]:
    """`count` burner processes for the duration of the block (killed on the way out, whatever happens)."""
    def start() -> None:
        os.nice(nice)
        os.sched_setaffinity(0, cores)

    procs = [subprocess.Popen([sys.executable, "-c", BURNERS[kind]], preexec_fn=start) for _ in range(count)]
    try:
        time.sleep(1.0 if count else 0.0)     # the stream burners allocate and touch their arrays first
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _row(task: str, phase: str, ms: list[Measurement]) -> dict[str, Any]:
    ok = [m for m in ms if m.correct and m.speedup]
    drifts = [m.baseline_ms / m.extra["baseline_reference_ms"] for m in ok if m.extra.get("baseline_reference_ms")]
    return {"task": task, "phase": phase, "evaluations": len(ms), "correct": len(ok),
            "speedups": " ".join(f"{m.speedup:.2f}" for m in ok),
            "baseline_ms": " ".join(f"{m.baseline_ms:.3f}" for m in ok),
            "reference_ms": ok[-1].extra.get("baseline_reference_ms") if ok else None,
            "max_drift": max((max(d, 1 / d) for d in drifts), default=None),
            "remeasured": sum(1 for m in ms if m.extra.get("remeasured")),
            "baseline_drift": sum(1 for m in ms if m.extra.get("baseline_drift")),
            "mean_reward": statistics.mean(m.reward for m in ms) if ms else None,
            "eval_s": statistics.mean(m.eval_seconds for m in ms) if ms else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=None)
    ap.add_argument("--backend", choices=["cpu", "cuda"], default=None)
    ap.add_argument("--tasks", default="builtin/rmsnorm,builtin/softmax", help="comma-separated task ids")
    ap.add_argument("--repeats", type=int, default=4, help="evaluations per task and phase")
    ap.add_argument("--load", type=int, default=2, help="burner processes in the loaded phase")
    ap.add_argument("--burner", choices=sorted(BURNERS), default="stream")
    ap.add_argument("--nice", type=int, default=19, help="the burners' nice increment")
    ap.add_argument("--cores", default=None, help="comma-separated cores for the burners (default: all usable)")
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a stopped run still kills its burners
    overrides = list(args.overrides) + ([f"eval.backend={args.backend}"] if args.backend else [])
    cfg = load_config(args.config, overrides).eval
    cores = {int(c) for c in args.cores.split(",")} if args.cores else os.sched_getaffinity(0)
    tasks = [get_task(t) for t in args.tasks.split(",")]
    sources = [t.seeds[cfg.backend] for t in tasks]
    t0 = time.monotonic()
    builds = build_many(list(zip(tasks, sources)), cfg, os.cpu_count() or 1)
    print(f"built {len(builds)} seeds in {time.monotonic() - t0:.1f} s", flush=True)
    evaluators = [Evaluator(cfg) for _ in tasks]
    got: dict[tuple[str, str], list[Measurement]] = {}
    phases = [("idle", 0), ("loaded", args.load), ("idle-after", 0)]
    try:
        for phase, count in phases:
            print(f"phase {phase}: {count} {args.burner} burner(s) at nice {args.nice} on cores {sorted(cores)}",
                  flush=True)
            with burners(count, args.burner, args.nice, cores):
                for k in range(args.repeats):
                    for task, source, build, ev in zip(tasks, sources, builds, evaluators):
                        m = ev.evaluate(task, source, build)
                        got.setdefault((task.id, phase), []).append(m)
                        ref = m.extra.get("baseline_reference_ms") or 0
                        print(f"{task.id} {phase} #{k + 1}: speedup {m.speedup or 0:.3f} baseline "
                              f"{m.baseline_ms or 0:.4f} ms (reference {ref:.4f}) reward {m.reward:.3f} "
                              f"{m.rejected or ''} {m.detail[:90]} ({m.eval_seconds:.1f} s)", flush=True)
    finally:
        for ev in evaluators:
            ev.close()
    rows = [_row(task, phase, ms) for (task, phase), ms in got.items()]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
    keys = list(rows[0]) if rows else []
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
