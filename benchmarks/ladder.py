"""The built-in solution ladder's speed order: every rung of every built-in task on one backend.

    python benchmarks/ladder.py --config configs/local.yaml --backend cpu [--tasks builtin/softmax,...] \\
        [--mode evaluator|direct] [--jobs N] [--out ladder.json] [overrides]

`evaluator` (default): each rung goes through the whole evaluator, as the warm start verifies it
(gate, build in a process pool first, sandboxed correctness on fresh input sets, timing against the
configured baselines); the table has its verdict, time, best baseline and speedup.
`direct`: each rung is built by `load_inline` in a process pool, then loaded in this process, compared
with the task's float64 reference (`check_rung`: main and variant inputs, the evaluator's float32
bounds) and timed beside the reference Model in eager mode (triton's `do_bench` on cuda, a median of wall-clock calls on
cpu).  No sandbox, no gates: an independent cross-check of the evaluator's order that costs seconds per
rung instead of an evaluation's process start, for when device time is short.
Prints one row per rung in suite order (the seed first) and writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.tasks import get_task, load_suite  # noqa: E402
from rl_kernels.tasks.ladder import Rung, check_rung, load_ladder  # noqa: E402


Save = Callable[[list[dict[str, Any]]], None]


def _evaluator_rows(rungs: list[Rung], cfg: Any, jobs: int, progress: Callable[[str], None],
                    save: Save) -> list[dict[str, Any]]:
    from rl_kernels.evaluation.build import build_many
    from rl_kernels.evaluation.evaluator import Evaluator

    t0 = time.monotonic()
    builds = build_many([(r.task, r.source) for r in rungs], cfg.eval, jobs)
    progress(f"build phase: {len(rungs)} rungs, {jobs} jobs, {time.monotonic() - t0:.1f} s")
    evaluator = Evaluator(cfg.eval)
    rows = []
    for rung, build in zip(rungs, builds):
        m = evaluator.evaluate(rung.task, rung.source, build if build.key else None)
        rows.append({"task": rung.task.id, "rung": rung.name, "verdict": m.rejected or "correct",
                     "ms": m.candidate_ms, "baseline": m.baseline, "baseline_ms": m.baseline_ms,
                     "speedup": m.speedup, "eval_s": round(m.eval_seconds, 1), "detail": m.detail[-300:]})
        progress(json.dumps(rows[-1]))
        save(rows)
    return rows


def _build_in_child(rung: Rung, ext_dir: Path) -> str | None:
    """Runs the rung file in a child process so load_inline builds into ext_dir; None or the error tail."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext_dir), "MAX_JOBS": "1"}
    res = subprocess.run([sys.executable, "-c", "import sys; exec(compile(sys.stdin.read(), 'rung', 'exec'))"],
                         input=rung.source, capture_output=True, text=True, env=env, timeout=1800)
    return None if res.returncode == 0 else (res.stderr or res.stdout)[-1500:]


def _median_ms(fn: Callable[[], Any], device: str, budget_s: float = 2.0) -> float:
    if device == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    times, start = [], time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < budget_s and len(times) < 200):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def _direct_check(rung: Rung, device: str) -> dict[str, Any]:
    """`check_rung` (float64 reference, main and variant inputs), then the rung and eager timed."""
    import torch

    from rl_kernels.tasks import load_task_program

    check = check_rung(rung, device)
    if not check.comparison.ok:
        return {"verdict": "incorrect", "detail": check.comparison.detail}
    inputs = [x.to(device) for x in load_task_program(rung.task).get_inputs()]
    with torch.no_grad():
        ms = _median_ms(lambda: check.candidate(*inputs), device)
        eager_ms = _median_ms(lambda: check.reference(*inputs), device)
    return {"verdict": "correct", "ms": ms, "baseline": "eager (direct)", "baseline_ms": eager_ms,
            "speedup": eager_ms / ms, "detail": ""}


def _direct_rows(rungs: list[Rung], backend: str, jobs: int, progress: Callable[[str], None],
                 save: Save) -> list[dict[str, Any]]:
    ext_dir = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or REPO / ".ladder-extensions")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(ext_dir)
    t0 = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        errors = list(pool.map(lambda r: _build_in_child(r, ext_dir), rungs))
    progress(f"build phase: {len(rungs)} rungs, {jobs} jobs, {time.monotonic() - t0:.1f} s, "
             f"{sum(e is None for e in errors)} built")
    device = "cuda" if backend == "cuda" else "cpu"
    rows = []
    for rung, error in zip(rungs, errors):
        row: dict[str, Any] = {"task": rung.task.id, "rung": rung.name}
        if error is not None:
            rows.append({**row, "verdict": "build_failed", "detail": error})
            progress(json.dumps(rows[-1]))
            save(rows)
            continue
        try:
            rows.append({**row, **_direct_check(rung, device)})
        except Exception as exc:   # a rung that raises (or breaks the CUDA context) is reported, not fatal here
            rows.append({**row, "verdict": "error", "detail": f"{type(exc).__name__}: {exc}"[-1500:]})
        progress(json.dumps(rows[-1]))
        save(rows)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("task", "rung", "verdict", "ms", "baseline", "baseline ms", "speedup")
    lines = [head]
    for r in rows:
        lines.append((r["task"], r["rung"], r["verdict"], f"{r['ms']:.4f}" if r.get("ms") else "-",
                      r.get("baseline") or "-", f"{r['baseline_ms']:.4f}" if r.get("baseline_ms") else "-",
                      f"{r['speedup']:.3f}" if r.get("speedup") else "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |" for line in lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    ap.add_argument("--backend", choices=["cpu", "cuda"], default=None)
    ap.add_argument("--tasks", default=None, help="comma-separated built-in task ids (default: the suite)")
    ap.add_argument("--mode", choices=["evaluator", "direct"], default="evaluator")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="parallel builds")
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    overrides = list(args.overrides) + ([f"eval.backend={args.backend}"] if args.backend else [])
    cfg = load_config(args.config, overrides)
    backend = cfg.eval.backend
    tasks = [get_task(t) for t in args.tasks.split(",")] if args.tasks else load_suite("builtin")
    rungs = load_ladder(backend, tasks)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def save(rows: list[dict[str, Any]]) -> None:   # after every rung: a run cut short keeps its rows
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({"backend": backend, "mode": args.mode, "rows": rows}, indent=1))

    progress(f"{len(rungs)} rungs of {len(tasks)} tasks on {backend}, mode {args.mode}")
    rows = (_evaluator_rows(rungs, cfg, args.jobs, progress, save) if args.mode == "evaluator"
            else _direct_rows(rungs, backend, args.jobs, progress, save))
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
