"""A comparison (rl_kernels/comparison.py) as a reader meets it: one console line per (task, version)
as it finishes, the markdown table (one row per task x version, the pooled rows, the ratio lines)
and the two files beside each other in RUN_DIR/compare/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rl_kernels.comparison import Interval, Outcome, fast_key, geomean

COMPARE_DIR = "compare"


def _x(iv: Interval) -> str:
    """A speedup with its interval: `1.31x [1.12, 1.55]`; `-` when undefined."""
    if iv.get("value") is None:
        return "-"
    bounds = f" [{iv['low']:.2f}, {iv['high']:.2f}]" if iv.get("low") is not None else ""
    return f"{iv['value']:.2f}x{bounds}"


def _share(iv: Interval) -> str:
    """A rate with its interval: `0.41 [0.25, 0.56]`."""
    if iv.get("value") is None:
        return "-"
    bounds = f" [{iv['low']:.2f}, {iv['high']:.2f}]" if iv.get("low") is not None else ""
    return f"{iv['value']:.2f}{bounds}"


def _plain(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.2f}"


def cell_line(task: str, version: int, outcomes: list[Outcome], reference: str, thresholds: list[float],
              seconds: float) -> str:
    """The console line of one finished (task, version), from its outcomes alone (no intervals yet)."""
    n = len(outcomes)
    fast = ", ".join(f"{fast_key(p)} {sum(o.speedups.get(reference, 0.0) >= p for o in outcomes)}/{n}"
                     for p in thresholds)
    baselines = list(dict.fromkeys(b for o in outcomes for b in o.speedups))
    geo = ", ".join(f"geomean vs {b} " + (f"{g:.2f}x" if (g := geomean([o.speedups[b] for o in outcomes
                                                                          if b in o.speedups])) else "-")
                    for b in baselines) or "no kernel passed"
    reasons: dict[str, int] = {}
    for o in outcomes:
        reasons[o.reason] = reasons.get(o.reason, 0) + 1
    return (f"compare {task} v{version}: {n} completions, {sum(o.parsed for o in outcomes)} parsed, "
            f"{sum(o.compiled for o in outcomes)} compiled, {sum(o.correct for o in outcomes)} correct, "
            f"{sum(o.flagged for o in outcomes)} flagged; {fast}; "
            f"{geo}; outcomes {reasons} ({seconds:.0f} s)")


def ratio_line(r: dict[str, Any]) -> str:
    """e.g. `v12 / v0 pooled geomean vs eager 1.31x [1.12, 1.55] over 3 tasks (dropped: ...)`."""
    if r["value"] is None:
        head = (f"v{r['version']} / v{r['against']} pooled geomean vs {r['baseline']}: undefined (no task has a "
                "believed speedup against it in every version)")
    else:
        head = (f"v{r['version']} / v{r['against']} pooled geomean vs {r['baseline']} {_x(r)} over "
                f"{len(r['tasks'])} task(s)")
    dropped = "; ".join(f"{t}: {why}" for t, why in r["dropped"].items())
    return head + (f" (dropped: {dropped})" if dropped else "")


def markdown_table(s: dict[str, Any]) -> str:
    """One row per task x version, the pooled row per version, then the ratio lines; `flagged`
    counts the correct kernels whose speed was not believed (in no speed column)."""
    fasts = [fast_key(p) for p in s["fast_thresholds"]]
    level = f"{s['confidence']:.0%}"
    head = (["task", "version", "completions", "parse", "compile", f"correct [{level}]", "flagged"]
            + [f"{k} [{level}]" for k in fasts] + [f"geomean vs {b} [{level}]" for b in s["baselines"]] + ["note"])
    rows = []
    for c in s["cells"]:
        notes = [f"COLLAPSED: no correct kernel (v{s['versions'][0]} had some)"] if c["collapsed"] else []
        if not c["completions"]:
            notes.append("no completions (the generator failed)")
        elif all(g["value"] is None for g in c["geomean"].values()):
            notes.append("no kernel passed: geomean undefined")
        rows.append([c["task"], f"v{c['version']}", str(c["completions"]), _plain(c["parse_rate"]),
                     _plain(c["compile_rate"]), _share(c["correct_rate"]), str(c["flagged"])]
                    + [_share(c[k]) for k in fasts]
                    + [_x(c["geomean"][b]) for b in s["baselines"]] + ["; ".join(notes)])
    for p in s["pooled"]:
        geo = [_x(g) + (f" over {len(g['tasks'])}" if g["tasks"] else "") for g in map(p["geomean"].get, s["baselines"])]
        rows.append([f"**pooled** ({p['tasks']} tasks)", f"v{p['version']}", str(p["completions"]),
                     _plain(p["parse_rate"]), _plain(p["compile_rate"]), _share(p["correct_rate"]),
                     str(p["flagged"])]
                    + [_share(p[k]) for k in fasts] + geo + [""])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines + [""] + [ratio_line(r) for r in s["ratios"]])


def write_comparison(run_dir: Path, name: str, summary: dict[str, Any]) -> tuple[Path, Path]:
    """RUN_DIR/compare/<name>.json (every figure and outcome) and <name>.md (the table) beside it."""
    out = Path(run_dir) / COMPARE_DIR
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(summary, indent=1))
    md_path.write_text(f"# {summary.get('title', name)}\n\n{markdown_table(summary)}\n")
    return json_path, md_path
