"""What the evaluation sandbox costs: one kernel evaluated alternately under each isolation.

    python benchmarks/sandbox_cost.py [--config configs/local.yaml] [--task hgemm/fp32/256_256_256]
                                      [--candidate tests/candidates/honest/hgemm_cpu_fp32.cpp]
                                      [--repeats 5] [overrides]

Builds once (cached), then `repeats` rounds of one evaluation under `eval.sandbox.isolation=
namespaces` and one under `=process`, and prints per isolation the median evaluation seconds,
evaluations per minute, the candidate's median time and the speedup: the price of the namespaces
and whether they move the timing.  Works for either backend (the GPU suite has the same comparison
beside do_bench in benchmarks/gpu_evaluator.py, section `boundary`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402

ISOLATIONS = ("namespaces", "process")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    ap.add_argument("--task", default="hgemm/fp32/256_256_256")
    ap.add_argument("--candidate", default=str(REPO / "tests" / "candidates" / "honest" / "hgemm_cpu_fp32.cpp"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides).eval
    task = get_task(args.task)
    source = Path(args.candidate).read_text()
    evaluators = {iso: Evaluator(cfg.model_copy(update={"sandbox": cfg.sandbox.model_copy(update={"isolation": iso})}))
                  for iso in ISOLATIONS}
    first = evaluators["process"].evaluate(task, source)   # build and baselines into the cache
    if not first.correct:
        print(f"the candidate is not correct ({first.rejected}): {first.detail[:400]}")
        return 1
    runs: dict[str, list] = {iso: [] for iso in ISOLATIONS}
    for r in range(args.repeats):
        for iso in ISOLATIONS:
            t0 = time.monotonic()
            m = evaluators[iso].evaluate(task, source)
            runs[iso].append((time.monotonic() - t0, m))
            print(f"round {r + 1}/{args.repeats} {iso}: {runs[iso][-1][0]:.2f} s, correct={m.correct}", flush=True)
    print(f"\n{task.id}, {cfg.backend}, {args.repeats} evaluations per isolation, alternating\n")
    print("| isolation | eval s (median) | evaluations/min | candidate ms (median) | speedup (median) | all correct |")
    print("|---|---|---|---|---|---|")
    for iso, results in runs.items():
        secs = statistics.median(s for s, _ in results)
        cand = statistics.median(m.candidate_ms for _, m in results if m.correct)
        speed = statistics.median(m.speedup for _, m in results if m.correct)
        print(f"| {iso} | {secs:.2f} | {60 / secs:.1f} | {cand:.4f} | {speed:.3f} | {all(m.correct for _, m in results)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
