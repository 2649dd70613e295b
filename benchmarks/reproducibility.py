"""Does the same kernel get the same reward?  Each built-in seed evaluated N times in a row.

    python benchmarks/reproducibility.py --config configs/h200.yaml --backend cuda --repeats 10 \\
        [--tasks builtin/layernorm,builtin/softmax] [--variant NAME:key=value,...] [overrides]

For every task (default: the whole built-in suite) its own seed for the backend is built once, then
evaluated `--repeats` times with every variant in turn (variants alternate, so they share the
machine's thermal state), one baseline at a time (`--baselines`, default every configured module
baseline).  Prints one row per task x baseline x variant: the speedups, their spread over the
evaluations (max/min - 1 and IQR/median), the baseline's and the candidate's medians across the
evaluations, how many evaluations were re-measured or reported unstable, and the mean evaluation
time.  Writes the same as JSON to --out when given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import EvalConfig, apply_override, load_config  # noqa: E402
from rl_kernels.evaluation.build import build_many  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.evaluation.timing import rel_spread  # noqa: E402
from rl_kernels.tasks import get_task, load_suite  # noqa: E402


def _variant(text: str, base: EvalConfig) -> tuple[str, EvalConfig]:
    """NAME:key=value,key=value -> (NAME, the eval config with those dotted overrides)."""
    name, _, body = text.partition(":")
    data = base.model_dump(mode="json")
    for item in filter(None, body.split(",")):
        apply_override(data, item)
    return name, EvalConfig.model_validate(data)


def _row(task: str, baseline: str, variant: str, ms: list[Any]) -> dict[str, Any]:
    sp = [m.speedup for m in ms if m.correct and m.speedup]
    return {"task": task, "baseline": baseline, "variant": variant, "evaluations": len(ms),
            "correct": sum(m.correct for m in ms),
            "speedups": " ".join(f"{x:.3f}" for x in sp),
            "max/min-1": (max(sp) / min(sp) - 1) if sp else None,
            "iqr/median": rel_spread(sp) if len(sp) >= 4 else None,
            "baseline_ms": statistics.median(m.baseline_ms for m in ms if m.baseline_ms) if sp else None,
            "baseline_ms_max/min-1": (max(m.baseline_ms for m in ms if m.baseline_ms)
                                      / min(m.baseline_ms for m in ms if m.baseline_ms) - 1) if sp else None,
            "candidate_ms_max/min-1": (max(m.candidate_ms for m in ms if m.candidate_ms)
                                       / min(m.candidate_ms for m in ms if m.candidate_ms) - 1) if sp else None,
            "remeasured": sum(1 for m in ms if m.extra.get("remeasured")),
            "unstable": sum(1 for m in ms if m.extra.get("unstable_measurement")),
            "eval_s": statistics.mean(m.eval_seconds for m in ms),
            "rejected": sorted({m.rejected for m in ms if m.rejected})}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=None)
    ap.add_argument("--backend", choices=["cpu", "cuda"], default=None)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--tasks", default=None, help="comma-separated task ids (default: the built-in suite)")
    ap.add_argument("--baselines", default=None, help="comma-separated baselines (default: all configured)")
    ap.add_argument("--variant", action="append", default=[], help="NAME:dotted=override,... (repeatable)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel builds")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    overrides = list(args.overrides) + ([f"eval.backend={args.backend}"] if args.backend else [])
    cfg = load_config(args.config, overrides).eval
    tasks = [get_task(t) for t in args.tasks.split(",")] if args.tasks else load_suite("builtin")
    variants = dict(_variant(v, cfg) for v in args.variant) or {"default": cfg}
    sources = [t.seeds[cfg.backend] for t in tasks]
    t0 = time.monotonic()
    builds = build_many([(t, s) for t, s in zip(tasks, sources)], cfg, args.jobs)
    print(f"built {len(builds)} seeds in {time.monotonic() - t0:.1f} s", flush=True)
    rows = []
    for task, source, build in zip(tasks, sources, builds):
        names = args.baselines.split(",") if args.baselines else list(cfg.baselines.module)
        for name in names:
            got: dict[str, list[Any]] = {v: [] for v in variants}
            evaluators = {v: Evaluator(c.model_copy(update={"baselines": c.baselines.model_copy(
                update={"module": [name]})})) for v, c in variants.items()}
            for k in range(args.repeats):
                for v, ev in evaluators.items():
                    m = ev.evaluate(task, source, build)
                    got[v].append(m)
                    print(f"{task.id} {name} {v} #{k + 1}: speedup {m.speedup or 0:.3f} candidate "
                          f"{m.candidate_ms or 0:.4f} ms baseline {m.baseline_ms or 0:.4f} ms spreads "
                          f"{m.candidate_spread or 0:.3f}/{m.baseline_spread or 0:.3f} {m.rejected or ''} "
                          f"({m.eval_seconds:.1f} s) {m.extra.get('baseline_compile') or ''} {m.extra.get('phase_s')} "
                          f"{m.extra.get('workers')} forked={m.extra.get('forked')}", flush=True)
            for ev in evaluators.values():
                ev.close()
            for v, ms in got.items():
                rows.append(_row(task.id, name, v, ms))
                print(json.dumps(rows[-1]), flush=True)
            if args.out:   # after every task x baseline: a run cut short keeps what it measured
                Path(args.out).write_text(json.dumps(rows, indent=1))
    keys = list(rows[0]) if rows else []
    print("| " + " | ".join(keys) + " |")
    for r in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
