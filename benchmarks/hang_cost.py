"""What a hang costs: kernels that never return, and a slow honest one, through the whole evaluator.

    python benchmarks/hang_cost.py [--config configs/local.yaml] [--task hgemm/fp32/192_192_192]
                                   [--cases first_call,at_call,slow] [overrides]

Evaluates, on the config's backend, the regression candidates of tests/candidates/sandbox/: a
kernel that loops forever at its first call (`first_call`: one call in flight, correctness phase),
one that loops forever from its 25th call on (cpu; the 40th on cuda) (`at_call`: a timed window of
calls in flight), and an honest kernel at ~0.02x (`slow`: must be measured, not killed).  Prints
per case the verdict, the phase, the candidate calls in flight when the watchdog fired, their
expected work (calls x hang_factor x the baseline's median: the slowest speed still measured), the
silence at the kill, what the hang cost beyond that expected work, the hung phase's seconds (its
start to the kill) and the whole evaluation's (its baseline job included, its build not: the
candidates are built first).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.evaluation.build import build_many  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402

SANDBOX = REPO / "tests" / "candidates" / "sandbox"
CASES = {"first_call": "hang_first_call", "at_call": "hang_at_call", "slow": "slow_honest"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    ap.add_argument("--task", default="hgemm/fp32/192_192_192")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides).eval
    task = get_task(args.task)
    suffix = "_cuda.cu" if cfg.backend == "cuda" else "_cpu.cpp"
    sources = {case: (SANDBOX / (CASES[case] + suffix)).read_text() for case in args.cases.split(",")}
    build_many([(task, source) for source in sources.values()], cfg, jobs=2)
    evaluator = Evaluator(cfg)
    rows = []
    for case, source in sources.items():
        t0 = time.monotonic()
        m = evaluator.evaluate(task, source)
        wall = time.monotonic() - t0
        hang = m.extra.get("hang")
        phase = hang["phase"] if hang else list(m.extra.get("phase_s", {}))[-1] if m.rejected else None
        per_call = cfg.sandbox.hang_factor * m.baselines_ms[m.baseline] / 1e3 if m.baseline else float("nan")
        expected = hang["calls"] * per_call if hang else None
        rows.append((case, m.rejected or ("correct" if m.correct else "incorrect"), phase,
                     hang["calls"] if hang else None, expected, hang["silent_s"] if hang else None,
                     hang["silent_s"] - expected if hang else None,
                     m.extra.get("phase_s", {}).get(phase) if phase else None, wall,
                     f"{m.speedup:.4f}" if m.correct else "", m.baselines_ms.get(m.baseline) if m.baseline else None))
        print(f"{case}: {rows[-1][1]} in {wall:.1f} s  {m.detail[:300]}", flush=True)

    def f(x: object) -> str:
        return "" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)

    print(f"\n{task.id}, backend {cfg.backend}, boundary {cfg.sandbox.boundary}, hang_floor_s "
          f"{cfg.sandbox.hang_floor_s:g}, hang_factor {cfg.sandbox.hang_factor:g}, timeout_s {cfg.sandbox.timeout_s:g}\n")
    print("| case | verdict | phase | calls in flight | expected work s | silence at kill s | beyond expected s "
          "| hung phase s | evaluation s | speedup | baseline ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(f(x) for x in row) + " |")
    evaluator.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
