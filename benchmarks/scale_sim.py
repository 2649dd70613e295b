"""The real `rl-kernels train` pipeline at 8-64 GPUs on a machine with none: a scale simulation.

    python benchmarks/scale_sim.py --out DIR [--grid 8:2x8x5,16:4x16x11] [--time-scale 60]
                                   [--sim-minutes 30] [--gpus-per-node 8] [overrides...]

Each grid point `GPUS:GxCxT` runs the real driver, replay buffer, staleness books, placement plan
and placement group, and the real actors on a multi-node local Ray cluster (one raylet per
`--gpus-per-node` simulated GPUs, with a `sim_gpu` custom resource standing for them), with
generation, builds, evaluations and learner steps simulated inside those actors
(`cluster.simulate`, rl_kernels/simulation.py: latencies drawn from our measurements). G
generators, C compile workers, T timers, and one learner GPU: G + T + 1 = GPUS; a learner batch is
GPUS/2 groups (at least 4), so the staleness budget lets about GPUS groups be in flight.

Per point it reports groups finished and groups trained per simulated hour, each pool's utilisation and which pool bounds the
run, how long the producer waited on the staleness bound, the driver's own CPU seconds per group
and the group rate at which the driver alone would saturate a core, and the run's invariants:
every group id in trajectories.jsonl exactly once, every group the driver started accounted for
(accepted, filtered or failed), and no batch trained on a group older than `rollout.max_staleness`
versions. Writes DIR/scale_sim.json, DIR/scale_sim.md and, with matplotlib, DIR/scale_sim.png.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from rl_kernels.cluster.driver import Driver  # noqa: E402
from rl_kernels.cluster.train import LearnStage  # noqa: E402
from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.metrics import read_metrics  # noqa: E402
from rl_kernels.trajectories import read_groups  # noqa: E402

BUSY = 0.85      # a pool this busy (fraction of its actor-time) is what bounds the run


def parse_grid(text: str) -> list[tuple[int, int, int, int]]:
    """`8:2x8x5,16:4x16x11` -> [(gpus, generators, compilers, timers), ...], checked to add up."""
    out = []
    for item in text.split(","):
        gpus, _, combo = item.partition(":")
        g, c, t = (int(x) for x in combo.split("x"))
        if g + t + 1 != int(gpus):
            raise SystemExit(f"grid point {item}: {g} generators + {t} timers + 1 learner != {gpus} GPUs")
        out.append((int(gpus), g, c, t))
    return out


def run_point(gpus: int, g: int, c: int, t: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    nodes = -(-gpus // args.gpus_per_node)
    per_node_cpus = -(-(g + c + t + 1) // nodes) + 2      # every actor's logical core, plus slack
    run_dir = root / f"{gpus}gpu-{g}x{c}x{t}"
    node_list = ", ".join(f"{{name: n{i}, cpus: {per_node_cpus}, gpus: {args.gpus_per_node}}}" for i in range(nodes))
    wall_budget = args.sim_minutes * 60 / args.time_scale
    cfg = load_config(REPO / "configs" / "scale_sim.yaml", [
        f"run_dir={run_dir}", f"cluster.num_generators={g}", f"cluster.num_compilers={c}", f"cluster.num_timers={t}",
        f"cluster.nodes=[{node_list}]", f"cluster.simulate.time_scale={args.time_scale}",
        f"train.time_budget_s={wall_budget}", f"rollout.batch_groups={max(4, gpus // 2)}", *args.overrides])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(nodes):
        cluster.add_node(num_cpus=per_node_cpus, resources={"sim_gpu": args.gpus_per_node})
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        cpu0 = time.process_time()
        summary = Driver(LearnStage, cfg).run()
        cpu = time.process_time() - cpu0     # the driver process's CPU, actors' start-up included
    finally:
        ray.shutdown()
        cluster.shutdown()
    row = measure(summary, run_dir, summary["wall_s"], cpu, args.time_scale, cfg.rollout.max_staleness)
    return row | {"gpus": gpus, "nodes": nodes, "generators": g, "compilers": c, "timers": t,
                  "trained_groups_per_sim_hour": row["steps"] * cfg.rollout.batch_groups / row["sim_hours"]}


def measure(summary: dict[str, Any], run_dir: Path, wall: float, cpu: float, scale: float,
            max_staleness: int) -> dict[str, Any]:
    groups = [g for _, g in read_groups(run_dir / "trajectories.jsonl")]
    ids = Counter(g.group_id for g in groups)
    buf = summary["buffer"]
    records = read_metrics(run_dir)
    stale = [r["learner/staleness_max"] for r in records if "learner/staleness_max" in r]
    pipe = summary["pipeline"]
    utils = {"generators": pipe["pipeline/util/generators"], "compilers": pipe["pipeline/util/compilers"],
             "timers": pipe["pipeline/util/timers"], "learner": 1.0 - summary["learner_idle_ratio"]}
    bound = [k for k, v in utils.items() if v >= BUSY] or (["staleness"] if pipe["pipeline/idle/producer_blocked"] > 0.5 else ["driver"])
    finished = len(groups)
    return {
        "wall_s": wall, "sim_hours": wall * scale / 3600, "groups": finished, "steps": summary["steps"],
        "groups_per_sim_hour": finished / (wall * scale / 3600),
        "steps_per_sim_hour": summary["steps"] / (wall * scale / 3600),
        **{f"util_{k}": v for k, v in utils.items()},
        "producer_blocked": pipe["pipeline/idle/producer_blocked"],
        "bound": "+".join(bound),
        "driver_cpu_s_per_group": cpu / max(finished, 1),
        "driver_limit_groups_per_hour": 3600 / (cpu / max(finished, 1)) if cpu > 0 else None,
        "duplicated_groups": sum(n - 1 for n in ids.values() if n > 1),
        "unaccounted_groups": buf["submitted"] - (buf["accepted"] + buf["filtered"] + buf["failed"]),
        "max_staleness_trained": max(stale, default=0.0), "staleness_bound": max_staleness,
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


COLUMNS = ["gpus", "nodes", "generators", "compilers", "timers", "groups", "steps", "groups_per_sim_hour",
           "trained_groups_per_sim_hour",
           "util_generators", "util_compilers", "util_timers", "util_learner", "producer_blocked", "bound",
           "driver_cpu_s_per_group", "driver_limit_groups_per_hour", "duplicated_groups", "unaccounted_groups",
           "max_staleness_trained", "wall_s"]


def table(rows: list[dict[str, Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(k)) for k in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for gpus in sorted({r["gpus"] for r in rows}):
        pts = [r for r in rows if r["gpus"] == gpus]
        ax.plot([r["generators"] / r["timers"] for r in pts], [r["groups_per_sim_hour"] for r in pts], "o-",
                label=f"{gpus} GPUs")
        for r in pts:
            ax.annotate(r["bound"], (r["generators"] / r["timers"], r["groups_per_sim_hour"]), fontsize=7)
    ax.set_xlabel("generators / timers")
    ax.set_ylabel("groups per simulated hour")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--grid", default="8:2x8x5,8:4x8x3,16:4x16x11,16:8x16x7")
    p.add_argument("--time-scale", type=float, default=60.0)
    p.add_argument("--sim-minutes", type=float, default=30.0)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlk-scale-") as tmp:
        for gpus, g, c, t in parse_grid(args.grid):
            print(f"== {gpus} simulated GPUs: {g} generators, {c} compile workers, {t} timers, 1 learner", flush=True)
            rows.append(run_point(gpus, g, c, t, args, Path(tmp)))
            print(table(rows[-1:]), flush=True)
            (out / "scale_sim.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    (out / "scale_sim.md").write_text(table(rows) + "\n")
    plot(rows, out / "scale_sim.png")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
