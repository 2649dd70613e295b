"""Which evaluations of a finished run the baseline record would have refused a speed reward.

    python benchmarks/drift_replay.py RUN_DIR [--limit 2.0] [--keep 9] [--min-count 3]

Replays `evaluation/baseline_record.py` over the run's trajectories.jsonl in the order the groups
were written: each task's record starts empty, takes every baseline job's median (a change of the
cached `baselines_ms` a measurement carries) and the baseline median of every correct measurement it
trusts; a correct measurement whose baseline median lies more than `--limit` times off the record's
median (either way) is counted as drifted and stays out of the record. A program written twice in
one group counts once (the rollout evaluates it once). The evaluator re-measures such
an evaluation once before it decides; a replay cannot, so it counts what the first measurement would
have triggered. Prints one row per group with a drifted evaluation or a reference, and a total.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.evaluation.baseline_record import BaselineRecord  # noqa: E402
from rl_kernels.trajectories import FILENAME, read_groups  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--limit", type=float, default=2.0, help="drift factor (eval.reward.baseline_drift of the backend)")
    ap.add_argument("--keep", type=int, default=9)
    ap.add_argument("--min-count", type=int, default=3)
    args = ap.parse_args()
    path = args.run_dir / FILENAME
    if not path.is_file():
        print(f"{path}: no trajectories file (is {args.run_dir} a run directory?)", file=sys.stderr)
        return 2
    records: dict[str, BaselineRecord] = {}
    last_job: dict[str, dict[str, float]] = {}
    rows, correct, drifted = [], 0, 0
    with tempfile.TemporaryDirectory() as scratch:
        for _, group in read_groups(path):
            task = group.task_id
            record = records.setdefault(task, BaselineRecord(Path(scratch) / f"{len(records)}.json",
                                                             args.keep, args.min_count))
            ratios, flagged, seen = [], 0, set()
            for t in group.trajectories:
                m = t.measurement
                if m is None or not m.correct or not m.baseline_ms or t.source in seen:
                    continue
                seen.add(t.source)     # a program written twice in a group is evaluated once
                if m.baselines_ms and m.baselines_ms != last_job.get(task):
                    last_job[task] = m.baselines_ms
                    record.add(m.baselines_ms)
                correct += 1
                ref = record.reference(m.baseline)
                if ref is not None:
                    ratios.append(m.baseline_ms / ref)
                drift = record.drift(m.baseline, m.baseline_ms)
                if drift is not None and drift > args.limit:
                    flagged += 1
                else:
                    record.add({m.baseline: m.baseline_ms})
            drifted += flagged
            if ratios:
                rows.append((group.group_id[:7], task, group.policy_version, len(ratios), min(ratios),
                             max(ratios), flagged))
    print(f"| group | task | version | checked | baseline / reference min | max | drifted (> {args.limit}x) |")
    print("|---|---|---|---|---|---|---|")
    for g, task, v, n, lo, hi, f in rows:
        print(f"| {g} | {task} | v{v} | {n} | {lo:.2f} | {hi:.2f} | {f} |")
    print(f"\n{correct} correct measurements, {drifted} drifted (limit {args.limit}x, keep {args.keep}, "
          f"min {args.min_count})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
