"""One `rl-kernels train` run, then its learning and throughput figures as a table.

    python benchmarks/train_run.py --out DIR --config CONFIG [--resume] [overrides...]

Runs the real driver (cluster/train.py: Ray actors, real builds and evaluations, the LoRA/DeepSpeed
learner) and then reads the run directory alone (train_summary.json, metrics.jsonl,
trajectories.jsonl) to write DIR/train_run.json and DIR/train_run.md:

- per policy version: groups, mean reward, parse / compile / correct rates (from the trajectories);
- learner steps, steps/hour, learner idle ratio (waiting for a batch) and busy ratio;
- generation tokens/s two ways: the generators' own count over their busy time, and all
  completion tokens in trajectories.jsonl over the run's wall time (the two must be consistent);
- training tokens/s: completion tokens trained over the learner's step time, from metrics.jsonl;
- timer utilisation (fraction of wall time a timer was busy) and the timed fraction (time inside
  timed calls); weight-sync time (publish to every generator loaded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.cluster.driver import Driver  # noqa: E402
from rl_kernels.cluster.train import SUMMARY, LearnStage  # noqa: E402
from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.metrics import read_metrics  # noqa: E402
from rl_kernels.trajectories import read_groups  # noqa: E402


def per_version(run_dir: Path) -> list[dict[str, Any]]:
    """Reward and parse / compile / correct rates of the groups each policy version sampled."""
    by_version: dict[int, list[Any]] = defaultdict(list)
    for _, g in read_groups(run_dir):
        by_version[g.policy_version].append(g)
    rows = []
    for v in sorted(by_version):
        trajs = [t for g in by_version[v] for t in g.trajectories]
        n = len(trajs)
        rows.append({"version": v, "groups": len(by_version[v]), "completions": n,
                     "reward_mean": statistics.fmean(t.reward for t in trajs),
                     "parse_rate": sum(t.source is not None for t in trajs) / n,
                     "compile_rate": sum(bool(t.measurement and t.measurement.compiled) for t in trajs) / n,
                     "correct_rate": sum(bool(t.measurement and t.measurement.correct) for t in trajs) / n,
                     "truncated_rate": sum(t.truncated for t in trajs) / n})
    return rows


def figures(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    learner = [r for r in read_metrics(run_dir) if r.get("learner/loss") is not None]
    step_s = sum(r["learner/step_s"] for r in learner)
    trained_tokens = sum(r["learner/tokens"] for r in learner)
    completion_tokens = sum(len(t.token_ids) for _, g in read_groups(run_dir) for t in g.trajectories)
    gens = summary["generators"]
    gen_busy = sum(g["busy_s"] for g in gens)
    pipe = summary["pipeline"]
    return {
        "wall_s": summary["wall_s"], "steps": summary["steps"], "version": summary["version"],
        "groups": summary["groups"], "steps_per_hour": summary["steps_per_hour"],
        "learner_idle_ratio": summary["learner_idle_ratio"],
        "learner_busy_ratio": learner[-1]["learner/busy_ratio"] if learner else None,
        "generation_tokens_per_s_busy": sum(g["generated_tokens"] for g in gens) / gen_busy if gen_busy else None,
        "generation_tokens_per_s_wall": completion_tokens / summary["wall_s"],
        "training_tokens_per_s": trained_tokens / step_s if step_s else None,
        "learner_step_s_median": statistics.median(r["learner/step_s"] for r in learner) if learner else None,
        "skipped_steps": sum(r.get("learner/skipped", 0) for r in learner),
        "timer_utilisation": pipe["pipeline/util/timers"], "timer_timed_fraction": pipe["pipeline/timer_timed_fraction"],
        "compile_utilisation": pipe["pipeline/util/compilers"],
        "generator_utilisation": pipe["pipeline/util/generators"],
        "weight_sync_s_median": summary["weight_sync_s_median"],
        "reward_trend": summary["reward_trend"],
    }


def markdown(fig: dict[str, Any], versions: list[dict[str, Any]], command: str) -> str:
    def f(x: Any) -> str:
        return f"{x:.3f}" if isinstance(x, float) else str(x)

    lines = [f"Command: `{command}`", "", "| figure | value |", "|---|---|"]
    lines += [f"| {k} | {f(v)} |" for k, v in fig.items() if k != "reward_trend"]
    lines += ["", "| version | groups | reward mean | parse | compile | correct | truncated |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['version']} | {r['groups']} | {r['reward_mean']:.3f} | {r['parse_rate']:.2f} | "
              f"{r['compile_rate']:.2f} | {r['correct_rate']:.2f} | {r['truncated_rate']:.2f} |" for r in versions]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--resume", action="store_true", help="continue the config's run_dir from its checkpoint")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)
    t0 = time.time()
    summary = Driver(LearnStage, cfg, resume=args.resume).run()
    run_dir = Path(cfg.run_dir)
    fig = figures(run_dir, json.loads((run_dir / SUMMARY).read_text()) | summary)
    versions = per_version(run_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/train_run.py " + " ".join(sys.argv[1:])
    (out / "train_run.json").write_text(json.dumps({"command": command, "started": t0, "figures": fig,
                                                    "versions": versions}, indent=1, default=str))
    (out / "train_run.md").write_text(markdown(fig, versions, command))
    print(markdown(fig, versions, command))


if __name__ == "__main__":
    main()
