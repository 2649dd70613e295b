"""A stage-3 run's kernels per policy version, and per task and third of the run: the tables of
docs/LEARNING.md, read from the run directory alone.

    python benchmarks/learning_table.py RUN_DIR [--leave-out GROUP_ID,...] [--out table.md]

Per group (in policy-version order): each completion's program (its extension name's suffix after
the task, "seed" without one) with its speedup when correct, else why not; correct count; mean
reward. Per third of the versions: completions, compiled, correct, mean reward and mean ln(speedup)
of the correct kernels. Per task and third: correct kernels, mean ln(speedup), geomean speedup, and
the share of correct programs that keep an OpenMP `parallel` pragma. The trend: the least-squares
slope of the correct kernels' ln(speedup) over policy versions, per task and pooled within tasks
(each task's own mean taken out, so a run that writes more kernels for an easy task does not read
as a rise), per 10 versions, with its standard error. `--leave-out` names groups
(ids or their prefixes, e.g. g000013) whose measurements are known to be disturbed: their rows stay
in the first table, marked, and they count in neither summary. In the summaries a correct kernel
is one that passed every gate with a believed speed (`archive.passed_every_gate`); a flagged or
unsettled speed shows in the first table, marked `flagged`, and counts in no summary.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.archive import passed_every_gate  # noqa: E402
from rl_kernels.trajectories import Group, Trajectory, read_groups  # noqa: E402

_NAME = re.compile(r"name\s*=\s*[\"']([A-Za-z0-9_]+)[\"']")


def program(task_id: str, source: str | None) -> str:
    """The program's name from its extension name: the suffix after `rlk_<task>_<backend>`."""
    if not source:
        return "-"
    names = _NAME.findall(source)
    if not names:
        return "unnamed"
    stem = "rlk_" + task_id.replace("/", "_")
    rest = names[0][len(stem):] if names[0].startswith(stem) else names[0]
    rest = re.sub(r"^_(cpu|cuda)", "", rest).lstrip("_")
    return rest or "seed"


def outcome(t: Trajectory) -> str:
    m = t.measurement
    if m is not None and m.correct and m.speedup is not None:
        return f"{m.speedup:.2f}x" + ("" if passed_every_gate(m) else " flagged")
    if m is not None and m.rejected:
        return m.rejected
    return (t.detail or "no code").split(":")[0].split()[0]


def ln_speedup(t: Trajectory) -> float | None:
    """ln(speedup) of a kernel that passed every gate with a believed speed (`passed_every_gate`);
    None for any other completion, so a kernel that games its timing never reads as a rise."""
    m = t.measurement
    return math.log(m.speedup) if m is not None and passed_every_gate(m) else None


def group_row(g: Group) -> str:
    cells = ", ".join(f"{program(g.task_id, t.source)} {outcome(t)}" for t in g.trajectories)
    correct = sum(bool(t.measurement and t.measurement.correct) for t in g.trajectories)
    reward = statistics.fmean(t.reward for t in g.trajectories)
    return f"| v{g.policy_version} | {g.task_id.split('/')[-1]} | {cells} | {correct}/{len(g.trajectories)} | {reward:.3f} |"


def bounds(groups: list[Group]) -> list[tuple[int, int]]:
    """The three version ranges, from every group of the run (left-out ones included)."""
    last = max(g.policy_version for g in groups)
    return [(0, last // 3), (last // 3 + 1, 2 * last // 3), (2 * last // 3 + 1, last)]


def totals(groups: list[Group], ranges: list[tuple[int, int]]) -> list[str]:
    rows = []
    for lo, hi in ranges:
        ts = [t for g in groups if lo <= g.policy_version <= hi for t in g.trajectories]
        compiled = sum(bool(t.measurement and t.measurement.compiled) for t in ts)
        correct = [t for t in ts if ln_speedup(t) is not None]
        reward = f"{statistics.fmean(t.reward for t in correct):.3f}" if correct else "-"
        ln = [ln_speedup(t) for t in correct]
        logs = f"{statistics.fmean(ln):+.3f}" if ln else "-"
        share = f" ({len(correct) / len(ts):.0%})" if ts else ""
        rows.append(f"| v{lo}-v{hi} | {len(ts)} | {compiled} | {len(correct)}{share} | {reward} | {logs} |")
    return rows


def thirds(groups: list[Group], ranges: list[tuple[int, int]]) -> list[str]:
    rows = []
    for task in sorted({g.task_id for g in groups}):
        for lo, hi in ranges:
            kernels = [t for g in groups if g.task_id == task and lo <= g.policy_version <= hi
                       for t in g.trajectories if ln_speedup(t) is not None]
            if not kernels:
                rows.append(f"| {task.split('/')[-1]} | v{lo}-v{hi} | 0 | - | - | - |")
                continue
            logs = [ln_speedup(t) for t in kernels]
            omp = sum("#pragma omp parallel" in (t.source or "") for t in kernels) / len(kernels)
            rows.append(f"| {task.split('/')[-1]} | v{lo}-v{hi} | {len(kernels)} | {statistics.fmean(logs):+.3f} | "
                        f"{math.exp(statistics.fmean(logs)):.2f}x | {omp:.0%} |")
    return rows


def slope(points: list[tuple[float, float]], means_removed: int = 0) -> tuple[float, float] | None:
    """Least-squares slope of y over x and its standard error; None without two x values and a residual.
    `means_removed`: group means already taken out of the points (each costs a residual degree of freedom)."""
    if len(points) < 3 + means_removed:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    residual = sum((y - my - b * (x - mx)) ** 2 for x, y in points)
    return b, math.sqrt(residual / (len(points) - 2 - means_removed) / sxx)


def correct_points(groups: list[Group]) -> dict[str, list[tuple[float, float]]]:
    """Per task: (policy version, ln(speedup)) of each correct kernel."""
    by_task: dict[str, list[tuple[float, float]]] = {}
    for g in groups:
        for t in g.trajectories:
            if (ln := ln_speedup(t)) is not None:
                by_task.setdefault(g.task_id, []).append((g.policy_version, ln))
    return by_task


def trend(by_task: dict[str, list[tuple[float, float]]]) -> list[tuple[str, int, tuple[float, float] | None]]:
    """(task, kernels, slope and its standard error) per task, then pooled within tasks: each task's
    mean version and mean ln(speedup) taken out, so that more kernels of a faster task later in the
    run do not read as a rise."""
    centred: list[tuple[float, float]] = []
    for points in by_task.values():
        mx = statistics.fmean(x for x, _ in points)
        my = statistics.fmean(y for _, y in points)
        centred += [(x - mx, y - my) for x, y in points]
    fits = [(name, len(points), slope(points)) for name, points in sorted(by_task.items())]
    return [*fits, ("pooled within tasks", len(centred), slope(centred, means_removed=max(len(by_task) - 1, 0)))]


def trend_rows(by_task: dict[str, list[tuple[float, float]]]) -> list[str]:
    rows = []
    for name, n, fit in trend(by_task):
        cell = f"{10 * fit[0]:+.3f} ± {10 * fit[1]:.3f} | {fit[0] / fit[1]:+.1f}" if fit and fit[1] > 0 else "- | -"
        rows.append(f"| {name.split('/')[-1]} | {n} | {cell} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--leave-out", default="", help="comma-separated group ids or prefixes, out of the summaries")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    groups: list[Group] = sorted((g for _, g in read_groups(args.run_dir)), key=lambda g: (g.policy_version, g.group_id))
    if not groups:
        raise SystemExit(f"{args.run_dir}: no groups in trajectories.jsonl")
    prefixes = tuple(p for p in args.leave_out.split(",") if p)
    unmatched = [p for p in prefixes if not any(g.group_id.startswith(p) for g in groups)]
    if unmatched:
        raise SystemExit(f"--leave-out: no group of {args.run_dir} starts with {', '.join(unmatched)}")
    kept = [g for g in groups if not g.group_id.startswith(prefixes)] if prefixes else groups
    ranges = bounds(groups)
    rows = [group_row(g) + (" left out of the summaries |" if g not in kept else "") for g in groups]
    lines: list[Any] = ["| version | task | programs (speedup over the baseline when correct; else why not) | correct | mean reward |",
                        "|---|---|---|---|---|", *rows, "",
                        "| versions | completions | compiled | correct | mean reward of correct kernels | mean ln(speedup) of correct |",
                        "|---|---|---|---|---|---|", *totals(kept, ranges), "",
                        "| task | versions | correct kernels | mean ln(speedup) | geomean speedup | omp share |",
                        "|---|---|---|---|---|---|", *thirds(kept, ranges), "",
                        "| task | correct kernels | ln(speedup) per 10 versions ± standard error | t |",
                        "|---|---|---|---|", *trend_rows(correct_points(kept))]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
