"""Evaluations per minute on one timer, and where an evaluation's time goes, for each way of starting
the worker: when (`eval.sandbox.prestart`: `off` when its job arrives, `after_job` when the job
before it ended, `beside_job` as the job before it started) and how (a new process that imports for
itself, or with a `+fork` suffix forked from the fork server, `eval.sandbox.fork_server`), and
whether a started worker creates its CUDA contexts before its job (a `+device` suffix,
`eval.sandbox.prestart_device`; without it, it does not) and makes the running job's problem before
its job (a `+problem` suffix, `eval.sandbox.prestart_problem`; without it, it does not), in one run.

    python benchmarks/eval_throughput.py --config configs/local.yaml \\
        [--tasks hgemm/fp32/256_256_256,builtin/softmax] [--paths off,beside_job,off+fork,beside_job+fork] \\
        [--repeats 8] [--gap-s 0] [--out X.json] [overrides]

Per task, the task's own seed for the backend is built and its baselines measured first (cached,
not counted); then per path one evaluator runs one untimed evaluation (so a started worker exists)
and `repeats` evaluations back to back (`--gap-s` seconds of idle between them, not counted: a
timer waiting for the next candidate).  The paths run one after the other, never interleaved (an
evaluator's started worker must not import beside the other path's timed calls).

Printed per task and path: evaluations per minute (repeats over the summed evaluation wall time),
the median and p90 evaluation time, the median and p90 of each worker phase (`start` is process
start and imports for a fresh worker, reading the job for a started one; `setup` the device and
the task's problem; `warm` the baseline's first call; `share` (split boundary) the runner's setup
and the input sets made and mapped into it; `timing` the baseline's and the candidate's interleaved calls;
`teardown` from the verdict to the process's end; a re-measured evaluation shows its last
measurement's phases), the started worker's own start-up paid before its job, the
share of the evaluation spent in timed calls (samples x (candidate + baseline time)) and in the
correctness, launch-evidence and timing phases, and the speedup (whether the new path measures
what the old one did).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import EvalConfig, load_config  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402
from rl_kernels.types import Measurement  # noqa: E402

PATHS = (*(f"{when}{how}" for how in ("", "+fork") for when in ("off", "after_job", "beside_job")),
         "after_job+fork+problem", "beside_job+fork+problem",
         *(f"{when}+fork+device{problem}" for problem in ("", "+problem") for when in ("after_job", "beside_job")))
PHASES = ("start", "setup", "baselines", "warm", "share", "load", "correctness", "launches", "timing", "teardown")
CHECKED_AND_TIMED = ("correctness", "launches", "timing")


def quantile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest rank (p90 of 8 values is the 8th)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def run_path(cfg: EvalConfig, task_id: str, path: str, repeats: int,
             gap_s: float) -> list[tuple[float, Measurement]]:
    """`repeats` evaluations of the task's seed by one evaluator, each with its wall seconds."""
    task = get_task(task_id)
    source = task.seeds[cfg.backend]
    prestart, *how = path.split("+")
    path_cfg = cfg.model_copy(update={"sandbox": cfg.sandbox.model_copy(
        update={"prestart": prestart, "fork_server": "fork" in how, "prestart_device": "device" in how,
                "prestart_problem": "problem" in how})})
    evaluator = Evaluator(path_cfg)
    build = evaluator.build(task, source)
    evaluator.best_baseline(task)
    evaluator.evaluate(task, source, build)      # untimed: the first evaluation leaves a started worker
    runs = []
    for i in range(repeats):
        time.sleep(gap_s)
        t0 = time.monotonic()
        m = evaluator.evaluate(task, source, build)
        runs.append((time.monotonic() - t0, m))
        phases = " ".join(f"{p} {v:.2f}" for p, v in m.extra.get("phase_s", {}).items())
        ahead = m.extra.get("problem_ahead")
        made = f", made ahead {ahead['task']} in {ahead['seconds']:.2f} s{' (failed)' if ahead['error'] else ''}" if ahead else ""
        print(f"{task_id} {path} {i + 1}/{repeats}: {runs[-1][0]:.2f} s, {m.rejected or 'correct'}, "
              f"workers {m.extra.get('workers')}, forked {m.extra.get('forked', '-')}, started {m.extra.get('prestart_s', '-')} s before"
              f"{made}; {phases}", flush=True)
        if m.rejected:
            print(f"  {m.rejected}: {m.detail[-1500:]}", flush=True)
    evaluator.close()
    return runs


def summarise(runs: list[tuple[float, Measurement]]) -> dict[str, Any]:
    secs = [s for s, _ in runs]
    phases = {p: [m.extra.get("phase_s", {}).get(p, 0.0) for _, m in runs] for p in PHASES}
    correct = [m for _, m in runs if m.correct and m.speedup]
    timed = [m.samples * (m.candidate_ms + m.baseline_ms) / 1e3 / s for s, m in runs if m.correct and m.samples]
    checked = [sum(m.extra.get("phase_s", {}).get(p, 0.0) for p in CHECKED_AND_TIMED) / s for s, m in runs]
    prestart = [m.extra["prestart_s"] for _, m in runs if "prestart_s" in m.extra]
    workers: dict[str, int] = {}
    for _, m in runs:
        for w in m.extra.get("workers", []):
            workers[w] = workers.get(w, 0) + 1
    return {
        "evaluations": len(runs), "per_minute": 60 * len(runs) / sum(secs),
        "median_s": statistics.median(secs), "p90_s": quantile(secs, 0.9),
        "phases_median": {p: statistics.median(v) for p, v in phases.items()},
        "phases_p90": {p: quantile(v, 0.9) for p, v in phases.items()},
        "prestart_median_s": statistics.median(prestart) if prestart else None,
        "timed_fraction": statistics.median(timed) if timed else None,
        "checked_and_timed_fraction": statistics.median(checked),
        "correct": len(correct), "remeasured": sum(len(m.extra.get("workers", [])) > 1 for _, m in runs),
        "speedups": [m.speedup for m in correct], "workers": workers,
        "forked": sum(bool(m.extra.get("forked")) for _, m in runs),
    }


def header() -> str:
    return ("| task | path | evaluations/min | median s | p90 s | " + " | ".join(f"{p} (median/p90)" for p in PHASES)
            + " | worker start before its job | timed calls | correctness+timing phases | speedup median (min-max) | correct | forked |\n"
            + "|---" * (11 + len(PHASES)) + "|")


def row(r: dict[str, Any]) -> str:
    sp = r["speedups"]
    speed = f"{statistics.median(sp):.3f} ({min(sp):.3f}-{max(sp):.3f})" if sp else "-"
    pre = f"{r['prestart_median_s']:.2f}" if r["prestart_median_s"] is not None else "-"
    timed = f"{100 * r['timed_fraction']:.1f}%" if r["timed_fraction"] is not None else "-"
    return (f"| {r['task']} | {r['path']} | {r['per_minute']:.1f} | {r['median_s']:.2f} | {r['p90_s']:.2f} | "
            + " | ".join(f"{r['phases_median'][p]:.2f}/{r['phases_p90'][p]:.2f}" for p in PHASES)
            + f" | {pre} | {timed} | {100 * r['checked_and_timed_fraction']:.0f}% | {speed} | "
            f"{r['correct']}/{r['evaluations']} | {r['forked']}/{r['evaluations']} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    ap.add_argument("--tasks", default=None, help="comma-separated task ids (default: an hgemm and builtin/softmax)")
    ap.add_argument("--paths", default=None, help=f"comma-separated, of {', '.join(PATHS)} (default: all that "
                    "apply to the backend; +device is cuda only)")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--gap-s", type=float, default=0.0, help="idle seconds before each evaluation (not counted)")
    ap.add_argument("--out", default=None, help="JSON of every row, rewritten after each path")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides).eval
    usable = [p for p in PATHS if cfg.backend == "cuda" or "+device" not in p]
    paths = args.paths.split(",") if args.paths else usable
    unknown = [p for p in paths if p not in usable]
    if unknown:
        ap.error(f"unknown path(s) {', '.join(unknown)} for the {cfg.backend} backend; choose from {', '.join(usable)}")
    default_hgemm = "hgemm/fp32/2048_2048_2048" if cfg.backend == "cuda" else "hgemm/fp32/256_256_256"
    tasks = args.tasks.split(",") if args.tasks else [default_hgemm, "builtin/softmax"]
    print(f"{len(tasks)} tasks on {cfg.backend}, paths {', '.join(paths)}, {args.repeats} evaluations per path, "
          f"gap {args.gap_s} s", flush=True)
    results = []
    for task_id in tasks:
        for path in paths:
            results.append({"task": task_id, "path": path,
                            **summarise(run_path(cfg, task_id, path, args.repeats, args.gap_s))})
            print(row(results[-1]), flush=True)    # a run cut short keeps every finished path
            if args.out:
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps({"backend": cfg.backend, "gap_s": args.gap_s, "rows": results},
                                                     indent=1))
    print("\n" + header())
    for r in results:
        print(row(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
