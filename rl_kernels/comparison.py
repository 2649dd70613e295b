"""Policy versions of one run compared at an equal budget: does the trained policy write faster
correct kernels than its start? The figures per (task, version) cell and pooled per version, each
with a percentile bootstrap interval, so a reviewer can tell a gain from the noise of 32 samples.

Per cell (the completions of one task under one version, all from one prompt and one seed):

  completions, parse / compile / correct rates   over all completions
  fast_p     share of ALL completions that passed every gate (archive.passed_every_gate: a
             flagged or untrusted speedup is not believed) at >= p times the task's reference
             baseline (the first one configured for its kind: eager for module tasks)
  geomean    per baseline: the geometric mean speedup of the kernels that passed every gate;
             undefined (None) when none did
  flagged    correct kernels whose speed was not believed (`archive.speed_believed`): counted
             here, in neither fast_p nor the geomeans
  collapsed  a later version wrote no correct kernel where the first version wrote some

A kernel's speedup against baseline b: the evaluator times the candidate interleaved with one
baseline (`Measurement.baseline`, the fastest by default) and measures every configured baseline
once per task (`Measurement.baselines_ms`), so speedup_b = speedup * baselines_ms[b] /
baselines_ms[baseline]: the interleaved pair stays the anchor. A speed the evaluator did not believe
(above the ceiling, unsettled timing, a drifted baseline) counts in no speed figure: a kernel that
makes its own timing erratic would otherwise lift its version's geomean. A host noisy enough to
flag many honest kernels shows as a large `flagged` count in the cells of the version it hit.

Pooled per version and baseline: exp(mean over tasks of the task's mean ln speedup), every task
weighing the same, over the tasks with a kernel against that baseline in every compared version (a
ratio of two pools over different tasks would compare tasks, not versions); the others are dropped
and listed with why. The ratio: a later version's pooled geomean over the first version's.

Intervals: each cell's completions are resampled with replacement `bootstrap_resamples` times by
an RNG seeded from (compare.seed, task, version), every cell independently; each statistic is
recomputed on the same resamples (pooled figures and ratios from resample r of every cell). A
resample in which a statistic is undefined (no kernel passed) is left out of its interval, and
`defined` says what share of resamples was kept. Every completion's kernel is timed on its own
(`compare.measure_each`), repeats too, so the resamples carry the timing noise as well as the
policy's spread (a repeated kernel measured once would make a cell's interval a point).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rl_kernels.archive import passed_every_gate, source_sha256, speed_believed
from rl_kernels.config import BaselineConfig, CompareConfig
from rl_kernels.types import Measurement, Task

Interval = dict[str, Any]   # {"value": point estimate or None, "low": ..., "high": ..., ["defined": share]}


@dataclass(frozen=True)
class Outcome:
    """What became of one completion."""

    task: str
    version: int
    index: int
    kernel: str | None           # sha256 of the parsed source (12 hex digits): repeats show; None: nothing parsed
    reason: str                  # "correct", "flagged", "incorrect", the parser's or the evaluator's reason code
    parsed: bool
    compiled: bool
    correct: bool
    speedups: dict[str, float] = field(default_factory=dict)   # baseline -> speedup; only when it passed every gate
    flagged: bool = False        # correct, but its speed was not believed (so it has no speedups)


def speedups_of(m: Measurement) -> dict[str, float]:
    """The kernel's speedup against every baseline measured for its task (see the module
    docstring); empty unless it passed every gate."""
    if not passed_every_gate(m) or m.baseline is None:
        return {}
    timed = m.baselines_ms.get(m.baseline)
    return {b: m.speedup * ms / timed for b, ms in m.baselines_ms.items()} if timed else {m.baseline: m.speedup}


def outcome_of(task_id: str, version: int, index: int, source: str | None, parse_reason: str | None,
               m: Measurement | None) -> Outcome:
    """One completion's outcome; `m` is None when no code could be parsed (`parse_reason` says why)."""
    if m is None or source is None:
        return Outcome(task_id, version, index, None, parse_reason or "no_code", False, False, False)
    reason = m.rejected or ("flagged" if m.flagged else "correct" if m.correct else "incorrect")
    return Outcome(task_id, version, index, source_sha256(source)[:12], reason, True, m.compiled, m.correct,
                   speedups_of(m), flagged_speed(m))


def flagged_speed(m: Measurement) -> bool:
    """Correct and not rejected, but with a speed the evaluator did not believe."""
    return m.correct and m.rejected is None and not speed_believed(m)


def task_baselines(task: Task, cfg: BaselineConfig) -> list[str]:
    """The baselines configured for the task's kind, the reference (fast_p's) first."""
    return list(cfg.hgemm if task.kind == "hgemm" else cfg.module)


def fast_key(p: float) -> str:
    return f"fast_{p}"


def geomean(speedups: list[float]) -> float | None:
    """The geometric mean; None for no values (undefined, not 0 or 1)."""
    return math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None


def stable_seed(*parts: object) -> int:
    """A seed fixed by its parts (Python's hash() changes per process)."""
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:15], 16)


class _Cell:
    """One (task, version): its outcomes as arrays, and its bootstrap resamples' statistics."""

    def __init__(self, task: str, version: int, outcomes: list[Outcome], baselines: list[str], reference: str,
                 cfg: CompareConfig) -> None:
        self.task, self.version, self.outcomes, self.reference = task, version, outcomes, reference
        self.n = len(outcomes)
        ref = np.array([o.speedups.get(reference, 0.0) for o in outcomes])
        self.flags = {"parsed": np.array([o.parsed for o in outcomes], bool),
                      "compiled": np.array([o.compiled for o in outcomes], bool),
                      "correct": np.array([o.correct for o in outcomes], bool),
                      **{fast_key(p): ref >= p for p in cfg.fast_thresholds}}
        self.logs = {b: np.array([math.log(o.speedups[b]) if b in o.speedups else np.nan for o in outcomes])
                     for b in baselines}
        rng = np.random.default_rng(stable_seed(cfg.seed, task, version))
        b = cfg.bootstrap_resamples
        idx = rng.integers(0, self.n, size=(b, self.n)) if self.n else np.zeros((b, 0), int)
        self.counts_rep = {k: v[idx].sum(axis=1) for k, v in self.flags.items()}      # [B] per flag
        self.mean_log_rep = {k: _mean_log(v[idx]) for k, v in self.logs.items()}       # [B] per baseline, nan: none

    def count(self, flag: str) -> int:
        return int(self.flags[flag].sum())

    def mean_log(self, baseline: str) -> float:
        """Mean ln speedup of its kernels against `baseline`; nan when it has none."""
        return float(_mean_log(self.logs[baseline][None, :])[0])

    def kernels(self, baseline: str) -> int:
        return int((~np.isnan(self.logs[baseline])).sum())


def _mean_log(values: np.ndarray) -> np.ndarray:
    """Row means of [rows, n] ln speedups ignoring nan (no kernel); nan for a row without any."""
    k = (~np.isnan(values)).sum(axis=1)
    total = np.nansum(values, axis=1)
    return np.divide(total, k, out=np.full(len(k), np.nan), where=k > 0)


def _interval(point: float | None, replicates: np.ndarray, level: float, *, with_defined: bool = False) -> Interval:
    """A point estimate with the percentile interval of its defined (non-nan) replicates."""
    kept = replicates[~np.isnan(replicates)]
    low, high = (np.quantile(kept, [(1 - level) / 2, (1 + level) / 2]).tolist() if len(kept) and point is not None
                 else (None, None))
    out: Interval = {"value": point, "low": low, "high": high}
    if with_defined:
        out["defined"] = len(kept) / len(replicates) if len(replicates) else 0.0
    return out


def _rate(count: int, n: int) -> float | None:
    return count / n if n else None


def _cell_figures(c: _Cell, first: _Cell | None, cfg: CompareConfig) -> dict[str, Any]:
    level = cfg.confidence
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = {k: _interval(_rate(c.count(k), c.n), c.counts_rep[k] / c.n, level)
                 for k in ("correct", *map(fast_key, cfg.fast_thresholds))}
        geomean = {b: {**_interval(math.exp(c.mean_log(b)) if c.kernels(b) else None, np.exp(c.mean_log_rep[b]),
                                   level, with_defined=True), "kernels": c.kernels(b)} for b in c.logs}
    reasons: dict[str, int] = {}
    for o in c.outcomes:
        reasons[o.reason] = reasons.get(o.reason, 0) + 1
    return {"task": c.task, "version": c.version, "completions": c.n, "parsed": c.count("parsed"),
            "compiled": c.count("compiled"), "correct": c.count("correct"),
            "parse_rate": _rate(c.count("parsed"), c.n), "compile_rate": _rate(c.count("compiled"), c.n),
            "correct_rate": rates.pop("correct"), **rates, "reference": c.reference, "geomean": geomean,
            "flagged": sum(o.flagged for o in c.outcomes), "outcomes": reasons,
            "collapsed": first is not None and c.count("correct") == 0 and first.count("correct") > 0}


def _pooled(cells: dict[tuple[str, int], _Cell], tasks: list[str], versions: list[int], baselines: list[str],
            cfg: CompareConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per version: rates over all its completions and the pooled geomean per baseline; then each
    later version's ratio to the first, per baseline (the module docstring)."""
    level, b_rep = cfg.confidence, cfg.bootstrap_resamples
    pooled, ratios = [], []
    logs: dict[tuple[int, str], tuple[float, np.ndarray]] = {}   # (version, baseline) -> pooled mean ln, replicates
    kept: dict[str, list[str]] = {}
    for b in baselines:
        kept[b] = [t for t in tasks if all(cells[t, v].kernels(b) for v in versions)]
        for v in versions:
            if kept[b]:
                logs[v, b] = (float(np.mean([cells[t, v].mean_log(b) for t in kept[b]])),
                              np.mean([cells[t, v].mean_log_rep[b] for t in kept[b]], axis=0))
    for v in versions:
        mine = [cells[t, v] for t in tasks]
        n = sum(c.n for c in mine)
        with np.errstate(invalid="ignore", divide="ignore"):
            rates = {k: _interval(_rate(sum(c.count(k) for c in mine), n),
                                  sum(c.counts_rep[k] for c in mine) / n, level)
                     for k in ("correct", *map(fast_key, cfg.fast_thresholds))}
        geomean = {b: ({**_interval(math.exp(logs[v, b][0]), np.exp(logs[v, b][1]), level, with_defined=True),
                        "tasks": kept[b]} if (v, b) in logs else {"value": None, "low": None, "high": None,
                                                                  "tasks": []})
                   for b in baselines}
        pooled.append({"version": v, "tasks": len(tasks), "completions": n,
                       "flagged": sum(o.flagged for c in mine for o in c.outcomes),
                       "parse_rate": _rate(sum(c.count("parsed") for c in mine), n),
                       "compile_rate": _rate(sum(c.count("compiled") for c in mine), n),
                       "correct_rate": rates.pop("correct"), **rates, "geomean": geomean})
    v0 = versions[0]
    for v in versions[1:]:
        for b in baselines:
            dropped = {t: _why_dropped(cells, t, versions, b) for t in tasks if t not in kept[b]}
            if (v, b) in logs:
                ratio = _interval(math.exp(logs[v, b][0] - logs[v0, b][0]), np.exp(logs[v, b][1] - logs[v0, b][1]),
                                  level, with_defined=True)
            else:
                ratio = {"value": None, "low": None, "high": None, "defined": 0.0}
            ratios.append({"version": v, "against": v0, "baseline": b, **ratio, "tasks": kept[b], "dropped": dropped})
    return pooled, ratios


def _why_dropped(cells: dict[tuple[str, int], _Cell], task: str, versions: list[int], baseline: str) -> str:
    without = [v for v in versions if not cells[task, v].kernels(baseline)]
    if len(without) == len(versions):
        return f"no believed speedup against {baseline} in any version"
    return f"no believed speedup against {baseline} in " + ", ".join(f"v{v}" for v in without)


def compare_outcomes(outcomes: list[Outcome], tasks: list[str], versions: list[int], baselines: dict[str, list[str]],
                     cfg: CompareConfig) -> dict[str, Any]:
    """Every figure of the module docstring. `tasks` and `versions` (ascending: the first is the one
    the others are compared with) name the cells; `baselines` maps each task to its baselines, the
    reference first (`task_baselines`)."""
    if len(versions) < 2 or sorted(set(versions)) != versions:
        raise ValueError(f"compare needs two or more distinct versions in ascending order, got {versions}")
    missing = [t for t in tasks if not baselines.get(t)]
    if missing:
        raise ValueError(f"no baseline named for task(s) {missing}")
    by_cell: dict[tuple[str, int], list[Outcome]] = {(t, v): [] for t in tasks for v in versions}
    for o in outcomes:
        if (o.task, o.version) not in by_cell:
            raise ValueError(f"outcome of {o.task} v{o.version} is outside the compared tasks {tasks} "
                             f"and versions {versions}")
        by_cell[o.task, o.version].append(o)
    names = list(dict.fromkeys(b for t in tasks for b in baselines[t]))
    cells = {key: _Cell(key[0], key[1], outs, names, baselines[key[0]][0], cfg) for key, outs in by_cell.items()}
    figures = [_cell_figures(cells[t, v], cells[t, versions[0]] if v != versions[0] else None, cfg)
               for t in tasks for v in versions]
    pooled, ratios = _pooled(cells, tasks, versions, names, cfg)
    return {"versions": versions, "tasks": tasks, "baselines": names, "fast_thresholds": cfg.fast_thresholds,
            "confidence": cfg.confidence, "bootstrap_resamples": cfg.bootstrap_resamples, "seed": cfg.seed,
            "cells": figures, "pooled": pooled, "ratios": ratios,
            "collapsed": [{"task": f["task"], "version": f["version"]} for f in figures if f["collapsed"]],
            "outcomes": [asdict(o) for o in outcomes]}
