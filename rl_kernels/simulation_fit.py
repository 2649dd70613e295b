"""The scale simulation checked against a real run: its inputs fitted to the run's own
measurements, and the figures any train run directory shows (benchmarks/sim_vs_run.py).

The simulation (`cluster.simulate`, rl_kernels/simulation.py) predicts throughput from a handful
of latencies and rates; nobody knows how far off it is until it is given a real run's inputs and
made to predict that run. Both halves here read a run directory alone (config.yaml,
metrics.jsonl, trajectories.jsonl), so a stopped run serves as well as a finished one:

- `fit_simulation`: each `SimulationConfig` input from what the run measured, in the unit the
  simulation spends it in, each saying how it was derived or, when the run holds nothing to derive
  it from, that the default was kept.
- `run_figures`: throughput, utilisation and idle figures of a run directory, real or simulated
  (a simulated one's rates divided by its time scale), so both sides of the comparison are read by
  the same function from the same files.

No Ray here: the benchmark runs the simulation; this module only reads and compares.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_kernels.buffer_restore import RESUMED
from rl_kernels.config import Config, SimulationConfig, load_config
from rl_kernels.metrics import read_metrics
from rl_kernels.run_dir import CONFIG_FILE
from rl_kernels.trajectories import Group, read_groups, read_records
from rl_kernels.types import Measurement

# Settings a simulated run takes from the real one: what decides how work queues and overlaps.
CARRIED = ("cluster.num_generators", "cluster.generator_slots", "cluster.num_compilers", "cluster.num_timers",
           "rollout.batch_groups", "rollout.max_staleness", "rollout.dedupe_group_sources",
           "rollout.filter_zero_variance", "policy.group_size", "learner.publish_every", "prompts.mode",
           "suite", "rollout.tasks", "split")

# figure -> (metrics.jsonl key, whether it is a rate: a simulated run's is divided by its time scale)
FIGURES = {
    "steps_per_hour": ("learner/steps_per_hour", True),
    "groups_per_hour": (None, True),      # from candidates per minute and the group size
    "candidates_per_min": ("pipeline/candidates_per_min", True),
    "tokens_per_s": ("pipeline/tokens_per_s", True),
    "util_generators": ("pipeline/util/generators", False),
    "util_compilers": ("pipeline/util/compilers", False),
    "util_timers": ("pipeline/util/timers", False),
    "learner_busy": ("learner/busy_ratio", False),
    "learner_idle": ("learner/idle_ratio", False),
    "producer_blocked": ("pipeline/idle/producer_blocked", False),
}
# pool -> its utilisation figure (the learner's: busy fraction): the busiest one bounds the run
POOLS = {"generators": "util_generators", "compile pool": "util_compilers", "timers": "util_timers",
         "learner": "learner_busy"}


@dataclass(frozen=True)
class FittedInput:
    """One simulation input: the value the simulated run gets, whether the real run gave it
    (`derived`), and how (or, when not derived, which default was kept and why)."""

    name: str
    value: float | dict[str, float]
    derived: bool
    how: str


@dataclass(frozen=True)
class RunRecord:
    """What a run directory holds that the fit and the figures read."""

    cfg: Config
    groups: list[Group]
    rows: list[dict[str, Any]]
    start_step: int          # the step the run's last process started at (0 unless resumed)

    def last(self, key: str) -> dict[str, Any] | None:
        """The newest metrics record holding `key` (gauges and ratios are cumulative: the newest
        covers the whole of the last process)."""
        return next((r for r in reversed(self.rows) if r.get(key) is not None), None)

    @property
    def learner_rows(self) -> list[dict[str, Any]]:
        """Every learner step's record (a resumed run's re-trained steps included: each was paid for)."""
        return [r for r in self.rows if r.get("learner/step_s") is not None]


def read_run(run_dir: Path) -> RunRecord:
    """The run's resolved config, scored groups, metrics records and the step its last process
    started at (a resumed run's gauges restart with that process)."""
    run_dir = Path(run_dir)
    resumes = [r["step"] for r in read_records(run_dir) if r.get("event") == RESUMED]
    return RunRecord(cfg=load_config(run_dir / CONFIG_FILE), groups=[g for _, g in read_groups(run_dir)],
                     rows=read_metrics(run_dir), start_step=resumes[-1] if resumes else 0)


# ---- the fit ------------------------------------------------------------------------------------
def spec(values: list[float], floor: float) -> dict[str, float] | None:
    """Median and 90th percentile (linear interpolation), neither below `floor`; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    p90 = statistics.quantiles(ordered, n=10, method="inclusive")[-1] if len(ordered) > 1 else ordered[0]
    median = max(statistics.median(ordered), floor)
    return {"median": median, "p90": max(p90, median)}


def paid_builds(groups: list[Group], dedupe: bool) -> list[Measurement]:
    """One measurement per build the run paid for: with `rollout.dedupe_group_sources` a group's
    identical sources were built and evaluated once."""
    out: list[Measurement] = []
    for g in groups:
        measured = [t for t in g.trajectories if t.measurement is not None]
        if dedupe:
            measured = list({t.source: t for t in measured}.values())
        out += [t.measurement for t in measured if t.measurement is not None]
    return out


def _default(name: str, why: str) -> FittedInput:
    """The input left at SimulationConfig's default (our GPU measurements), saying why."""
    value = getattr(SimulationConfig(), name)
    shown = value.model_dump() if hasattr(value, "model_dump") else value
    return FittedInput(name, shown, False, f"{why}: default {shown}")


def fit_completion_tokens(groups: list[Group]) -> FittedInput:
    """Tokens per completion: the run's median and p90."""
    got = spec([float(len(t.token_ids)) for g in groups for t in g.trajectories], floor=1.0)
    if got is None:
        return _default("completion_tokens", "no completion in trajectories.jsonl")
    return FittedInput("completion_tokens", got, True, "completions' token counts, median and p90")


def fit_tokens_per_s(run: RunRecord) -> FittedInput:
    """A generator slot's tokens per second in the simulation's unit: a simulated group costs its
    longest completion's tokens, so the rate is the groups' longest completions over the slot-seconds
    the generators were busy (utilisation x slots x wall; the wall comes from the pipeline's
    tokens per second over the tokens every completion holds)."""
    gauges, c = run.last("pipeline/util/generators"), run.cfg.cluster
    longest = sum(max((len(t.token_ids) for t in g.trajectories), default=0) for g in run.groups)
    total = sum(len(t.token_ids) for g in run.groups for t in g.trajectories)
    if gauges is None or not total or not gauges.get("pipeline/tokens_per_s") or not gauges["pipeline/util/generators"]:
        return _default("tokens_per_s", "no generator utilisation or tokens/s gauge in metrics.jsonl")
    busy_per_s = gauges["pipeline/util/generators"] * c.num_generators * c.generator_slots
    rate = gauges["pipeline/tokens_per_s"] * (longest / total) / busy_per_s
    return FittedInput("tokens_per_s", rate, True,
                       "each group's longest completion over generator slot-seconds busy (includes Ray call "
                       "and adapter-load waits)")


def fit_build_s(builds: list[Measurement], floor: float) -> FittedInput:
    """Seconds per build: the uncached builds' median and p90, scaled by the share of builds that
    missed the cache. A cache hit costs next to nothing (and records the original build's seconds),
    the simulation has no cache: scaling keeps the compile pool's mean load the run's."""
    fresh = [m.build_seconds for m in builds if not m.build_cached and m.build_seconds > 0]
    got = spec(fresh, floor)
    if got is None:
        return _default("build_s", "no uncached build in trajectories.jsonl")
    share = len(fresh) / len(builds)
    scaled = {"median": max(got["median"] * share, floor), "p90": max(got["p90"] * share, floor)}
    return FittedInput("build_s", scaled, True,
                       f"uncached builds median {got['median']:.3g} s, p90 {got['p90']:.3g} s, x {share:.2f} "
                       f"(builds missing the cache: {len(fresh)} of {len(builds)})")


def fit_eval_s(builds: list[Measurement], floor: float) -> FittedInput:
    """Seconds per evaluation on a timer: median and p90 of the built candidates' evaluations."""
    got = spec([m.eval_seconds for m in builds if m.compiled and m.eval_seconds > 0], floor)
    if got is None:
        return _default("eval_s", "no evaluated candidate in trajectories.jsonl")
    return FittedInput("eval_s", got, True, "built candidates' eval_seconds, median and p90")


def fit_learner_tokens_per_s(run: RunRecord) -> FittedInput:
    """Completion tokens per learner second in the simulation's unit: a simulated step costs every
    completion token of its batch, so the rate is a batch's mean tokens (batch_groups x the mean
    group's tokens) over the mean learner call (the step plus publishing its adapter)."""
    rows, groups = run.learner_rows, run.groups
    if not rows or not groups:
        return _default("learner_tokens_per_s", "no learner step in metrics.jsonl")
    group_tokens = sum(len(t.token_ids) for g in groups for t in g.trajectories) / len(groups)
    batch_tokens = run.cfg.rollout.batch_groups * group_tokens
    seconds = statistics.fmean(r["learner/step_s"] + (r.get("learner/publish_s") or 0.0) for r in rows)
    if seconds <= 0:
        return _default("learner_tokens_per_s", "learner steps of no measurable time")
    return FittedInput("learner_tokens_per_s", batch_tokens / seconds, True,
                       f"{batch_tokens:.0f} tokens a batch over {seconds:.3g} s a step (step_s + publish_s)")


def fit_adapter_load_s(run: RunRecord) -> FittedInput:
    """Seconds to load a new adapter: the median time from publishing a version until every
    generator held it."""
    sync = [r["learner/weight_sync_s"] for r in run.rows if r.get("learner/weight_sync_s") is not None]
    if not sync:
        return _default("adapter_load_s", "no learner/weight_sync_s in metrics.jsonl")
    return FittedInput("adapter_load_s", statistics.median(sync), True, "median learner/weight_sync_s")


def fit_rates(groups: list[Group], builds: list[Measurement]) -> list[FittedInput]:
    """Parse, compile and correct rates as the simulation draws them: `parse_rate` is the share of
    completions that cost a build (deduplicated sources counted once), then builds that compiled,
    then compiled ones that were correct."""
    completions = sum(len(g.trajectories) for g in groups)
    compiled = sum(m.compiled for m in builds)
    rates = [("parse_rate", len(builds), completions, "completions that cost a build", "no completion"),
             ("compile_rate", compiled, len(builds), "builds that compiled", "no build"),
             ("correct_rate", sum(m.correct for m in builds), compiled, "compiled candidates that were correct",
              "nothing compiled")]
    return [FittedInput(name, n / d, True, f"{what}: {n} of {d}") if d else _default(name, none)
            for name, n, d, what, none in rates]


def fit_speedup(builds: list[Measurement]) -> FittedInput:
    """Speedup of a correct kernel: the run's median and p90."""
    got = spec([m.speedup for m in builds if m.correct and m.speedup], floor=0.0)
    if got is None or got["median"] <= 0:
        return _default("speedup", "no correct kernel with a speedup")
    return FittedInput("speedup", got, True, "correct kernels' speedups, median and p90")


def fit_simulation(run: RunRecord, *, floor_s: float) -> list[FittedInput]:
    """Every simulation input the run can give, each with how it was derived or why not; latencies
    are floored at `floor_s` (a lognormal needs a positive median)."""
    builds = paid_builds(run.groups, run.cfg.rollout.dedupe_group_sources)
    return [fit_tokens_per_s(run), fit_completion_tokens(run.groups), fit_adapter_load_s(run),
            fit_build_s(builds, floor_s), fit_eval_s(builds, floor_s), fit_learner_tokens_per_s(run),
            *fit_rates(run.groups, builds), fit_speedup(builds)]


def simulate_section(inputs: list[FittedInput], time_scale: float) -> dict[str, Any]:
    """`cluster.simulate` for the fitted inputs at `time_scale`, validated as a SimulationConfig."""
    values = {i.name: i.value for i in inputs} | {"time_scale": time_scale}
    return SimulationConfig.model_validate(values).model_dump(mode="json")


def carried_overrides(cfg: Config) -> list[str]:
    """`key=value` overrides that give a simulated run the real run's `CARRIED` settings."""
    def value(path: str) -> Any:
        """The setting at dotted `path`, as plain JSON data."""
        node: Any = cfg
        for part in path.split("."):
            node = getattr(node, part)
        return node.model_dump(mode="json") if hasattr(node, "model_dump") else node

    return [f"{path}={json.dumps(value(path))}" for path in CARRIED]


# ---- the figures --------------------------------------------------------------------------------
def run_steps(run: RunRecord) -> int:
    """Learner steps the run's last process took."""
    last = run.last("learner/step_s")
    return int(last["step"]) - run.start_step if last is not None else 0


def time_scale_of(cfg: Config) -> float:
    """Simulated seconds per wall second: 1 for a real run."""
    return cfg.cluster.simulate.time_scale if cfg.cluster.simulate is not None else 1.0


def run_figures(run: RunRecord) -> dict[str, float | None]:
    """Each of `FIGURES` for the run's last process, per simulated time for a simulated run; None
    where metrics.jsonl lacks it. Gauges come from the newest record holding them (the end of
    the run for a finished one), the learner's ratios from its newest step."""
    scale = time_scale_of(run.cfg)
    out: dict[str, float | None] = {}
    for name, (key, rate) in FIGURES.items():
        row = run.last(key) if key else None
        value = row[key] if row is not None else None
        out[name] = value / scale if value is not None and rate else value
    cands = out["candidates_per_min"]
    out["groups_per_hour"] = 60.0 * cands / run.cfg.policy.group_size if cands is not None else None
    return out


def busiest(figures: dict[str, float | None]) -> str:
    """The busiest pool and its utilisation, e.g. `timers (0.93)`: what bounds the run."""
    known = {pool: figures[key] for pool, key in POOLS.items() if figures[key] is not None}
    if not known:
        return "unknown (no utilisation in metrics.jsonl)"
    pool = max(known, key=lambda p: known[p] or 0.0)
    return f"{pool} ({known[pool]:.2f})"


def error_pct(measured: float | None, simulated: float | None) -> float | None:
    """(simulated - measured) / measured in percent; None when either is missing or measured is 0."""
    if measured is None or simulated is None or measured == 0:
        return None
    return 100.0 * (simulated - measured) / measured


def comparison(measured: dict[str, float | None], simulated: dict[str, float | None]) -> list[dict[str, Any]]:
    """One row per figure: measured, simulated and the error in percent."""
    return [{"figure": k, "measured": measured[k], "simulated": simulated[k],
             "error_pct": error_pct(measured[k], simulated[k])} for k in FIGURES]


def comparison_table(rows: list[dict[str, Any]]) -> str:
    """The comparison as a markdown table."""
    def cell(v: Any) -> str:
        return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:+.0f}"

    lines = ["| figure | measured | simulated | error % |", "|---|---|---|---|"]
    lines += [f"| {r['figure']} | {cell(r['measured'])} | {cell(r['simulated'])} | {pct(r['error_pct'])} |"
              for r in rows]
    return "\n".join(lines)


def inputs_table(inputs: list[FittedInput]) -> str:
    """The simulation's inputs as a markdown table: value, derived or default, and how."""
    def shown(v: float | dict[str, float]) -> str:
        return ", ".join(f"{k} {x:.3g}" for k, x in v.items()) if isinstance(v, dict) else f"{v:.3g}"

    lines = ["| input | value | from the run | how |", "|---|---|---|---|"]
    lines += [f"| {i.name} | {shown(i.value)} | {'yes' if i.derived else 'no'} | {i.how} |" for i in inputs]
    return "\n".join(lines)
