"""How far off is the scale simulation? One real train run against the simulation of that run.

    python benchmarks/sim_vs_run.py RUN_DIR [--out DIR] [--steps N] [--time-scale X]
                                    [--target-minutes M] [--max-minutes M] [--floor-s S] [overrides...]

Reads RUN_DIR alone (config.yaml, metrics.jsonl, trajectories.jsonl; finished or stopped) and fits
the simulation's inputs to what the run measured (rl_kernels/simulation_fit.py: generation
tokens/s, completion lengths, build and evaluation seconds, learner tokens/s, adapter load time,
parse / compile / correct rates, speedups), naming the inputs it could not derive and the default
kept for each. Then runs the real train driver with `cluster.simulate` set to those inputs and the
run's own counts and rollout settings (generators and their slots, compile workers, timers, batch
groups, group size, staleness bound; simulation_fit.CARRIED) for as many learner steps as the
run's last process took, on a local Ray of one node whose `sim_gpu` resource stands for the GPUs
(configs/scale_sim.yaml's base, as benchmarks/scale_sim.py), `--time-scale` times faster than real
time. Both run directories are read by the same function, so measured and simulated figures mean
the same thing.

Prints, and writes to DIR/sim_vs_run.md and DIR/sim_vs_run.json: figure | measured | simulated |
error % for steps/hour, groups/hour, candidates/minute, tokens/s, generator / compile pool /
timer utilisation, learner busy and idle fraction and producer blocked fraction; under it the
busiest pool of each (the bound), then the inputs with how each was derived.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.cluster.driver import Driver  # noqa: E402
from rl_kernels.cluster.train import LearnStage  # noqa: E402
from rl_kernels.config import Config, load_config  # noqa: E402
from rl_kernels.simulation_fit import (FittedInput, RunRecord, busiest, carried_overrides, comparison,  # noqa: E402
                                       comparison_table, fit_simulation, inputs_table, read_run, run_figures,
                                       run_steps, simulate_section)

BASE = REPO / "configs" / "scale_sim.yaml"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="the real train run directory to check the simulation against")
    p.add_argument("--out", type=Path, help="where sim_vs_run.md and .json go (default: RUN_DIR/sim_vs_run)")
    p.add_argument("--steps", type=int, help=(
        "learner steps to simulate (default: as many as the run's last process took)"))
    p.add_argument("--time-scale", type=float, help=(
        "simulated seconds per wall second (default: the run's length over --target-minutes, at least 1); "
        "on 2 cores keep it at 10 or below, where Ray's unscaled overhead stays small"))
    p.add_argument("--target-minutes", type=float, default=3.0, help=(
        "wall minutes the simulation should take when --time-scale is not given"))
    p.add_argument("--max-minutes", type=float, default=15.0, help=(
        "wall minutes after which the simulated run stops even short of its steps (train.time_budget_s)"))
    p.add_argument("--floor-s", type=float, default=1e-3, help=(
        "floor of a fitted latency's median and p90 in seconds: a lognormal needs a positive median, and "
        "a run whose builds all hit the cache measures ~0 s"))
    p.add_argument("overrides", nargs="*", help=(
        "config overrides of the simulated run, applied last (e.g. suite=builtin when the run's suite is "
        "not on this machine)"))
    return p.parse_args()


def choose_time_scale(measured: dict[str, float | None], steps: int, args: argparse.Namespace) -> float:
    """`--time-scale`, else the run's length over the target wall time (at least real time)."""
    if args.time_scale is not None:
        return args.time_scale
    per_hour = measured["steps_per_hour"]
    run_s = 3600.0 * steps / per_hour if per_hour else args.target_minutes * 60.0
    return max(1.0, run_s / (args.target_minutes * 60.0))


def simulation_config(run: RunRecord, inputs: list[FittedInput], steps: int, time_scale: float,
                      run_dir: Path, args: argparse.Namespace) -> Config:
    """The simulated run: scale_sim's base, the real run's carried settings, the fitted inputs, one
    node with a simulated GPU per generator, timer and the learner, and the run's slot polling
    scaled with the time (a poll is a wait, not the driver's work)."""
    c = run.cfg.cluster
    gpus = c.num_generators + c.num_timers + 1
    # every actor's logical core and the buffer's: what --dry-run plans with (a local Ray sizes itself)
    cpus = c.num_generators + c.num_compilers + c.num_timers + 2
    return load_config(BASE, [
        f"run_dir={run_dir}", *carried_overrides(run.cfg),
        f"cluster.simulate={json.dumps(simulate_section(inputs, time_scale))}",
        f"cluster.nodes=[{{name: sim, cpus: {cpus}, gpus: {gpus}}}]",
        f"train.max_steps={steps}", f"train.time_budget_s={args.max_minutes * 60.0}",
        f"rollout.slot_poll_s={run.cfg.rollout.slot_poll_s / time_scale}", *args.overrides])


def simulate(cfg: Config) -> RunRecord:
    """Run the real driver on simulated work; the simulated run directory, read back."""
    Driver(LearnStage, cfg, progress=False).run()
    return read_run(cfg.run_dir)


def report(rows: list[dict[str, Any]], bounds: dict[str, str], inputs: list[FittedInput], steps: int,
           time_scale: float, run_dir: Path) -> str:
    """The markdown report: the table, the bound line, the inputs."""
    return "\n".join([
        f"Run: `{run_dir}`; simulated {steps} learner steps at time scale {time_scale:.3g} "
        "(simulated figures per simulated time).", "", comparison_table(rows), "",
        f"Bound (busiest pool): measured {bounds['measured']}; simulated {bounds['simulated']}.", "",
        "Simulation inputs:", "", inputs_table(inputs), ""])


def main() -> int:
    args = parse_args()
    out = args.out or args.run_dir / "sim_vs_run"
    run = read_run(args.run_dir)
    steps = args.steps or run_steps(run)
    if steps <= 0:
        raise SystemExit(f"{args.run_dir} holds no learner step: nothing to simulate (give --steps)")
    inputs = fit_simulation(run, floor_s=args.floor_s)
    measured = run_figures(run)
    scale = choose_time_scale(measured, steps, args)
    print(f"simulating {steps} learner steps at time scale {scale:.3g}\n{inputs_table(inputs)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rlk-sim-vs-run-") as tmp:
        simulated = run_figures(simulate(simulation_config(run, inputs, steps, scale, Path(tmp) / "run", args)))
    rows = comparison(measured, simulated)
    bounds = {"measured": busiest(measured), "simulated": busiest(simulated)}
    text = report(rows, bounds, inputs, steps, scale, args.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_vs_run.md").write_text(text)
    (out / "sim_vs_run.json").write_text(json.dumps({
        "run_dir": str(args.run_dir), "steps": steps, "time_scale": scale, "rows": rows, "bound": bounds,
        "inputs": [vars(i) for i in inputs]}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
