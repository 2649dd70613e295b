"""The static gate over a folder of hgemm-ABI kernels: how many pass, and the first reason of each refusal.

    python benchmarks/gate_tally.py DIR [--backend cuda] [--task hgemm/fp32/1024_1024_1024] [--show 3]

Every `*.cu` (cuda) or `*.cpp` (cpu) file directly in DIR is checked with
`rl_kernels.evaluation.guards.static_check` as the evaluator checks a candidate before building it
(no build, no GPU); the table counts the verdicts by reason, with the first few files and their first
finding per reason.  Used on released kernel sets (CUDA-L2's `kernels/<gpu>/`) to see what the gate
refuses in code nobody here wrote.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rl_kernels.evaluation.guards import static_check  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--backend", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--task", default="hgemm/fp32/1024_1024_1024", help="the hgemm task the files are checked as")
    ap.add_argument("--show", type=int, default=3, help="files listed per reason")
    args = ap.parse_args()
    files = sorted(args.folder.glob("*.cu" if args.backend == "cuda" else "*.cpp"))
    if not files:
        print(f"error: no {'*.cu' if args.backend == 'cuda' else '*.cpp'} files in {args.folder}", file=sys.stderr)
        return 2
    task = get_task(args.task)
    by_reason: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for path in files:
        verdict = static_check(task, path.read_text(errors="replace"), args.backend)
        reason = verdict.reason.value if verdict.reason else "passes"
        by_reason[reason].append((path.name, verdict.detail.splitlines()[0] if verdict.reason else ""))
    print(f"{len(files)} files in {args.folder}, static gate ({args.backend}, checked as {task.id})\n")
    print("| verdict | files | examples (first finding) |")
    print("|---|---|---|")
    for reason, rows in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        shown = "; ".join(f"{name}: {first[:120]}" if first else name for name, first in rows[:args.show])
        print(f"| {reason} | {len(rows)} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
