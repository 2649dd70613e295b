"""`rl-kernels report RUN_DIR`: a run directory turned into PNG curves and one HTML page.

Reads only the two files a run keeps as its record of truth, trajectories.jsonl (every persisted
group, whatever its status) and metrics.jsonl, so a report needs neither W&B nor the config, and
works on a run that is still being written (the readers skip a torn last line).

Figures are drawn on `matplotlib.figure.Figure` objects with an Agg canvas, never through pyplot:
no display is needed and no global figure state is left behind. A figure whose data the run does
not hold (a rollout-only run has no learner curves) is skipped and the page says so.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rl_kernels import metrics, trajectories
from rl_kernels.archive import passed_every_gate
from rl_kernels.metrics import read_metrics
from rl_kernels.trajectories import Group, read_groups

LEARNER_KEYS = ("learner/loss", "learner/policy_loss", "learner/kl", "learner/clip_fraction",
                "learner/entropy", "learner/grad_norm", "learner/mismatch_kl")
TIMER_UTIL_KEY = "pipeline/util/timers"
# Past this many tasks (a KernelBench level has 100) the speed-trend legend would cover the plot.
LEGEND_MAX_TASKS = 12

Record = dict[str, Any]


@dataclass
class Report:
    """What `write_report` wrote: the page, the figures it holds, and the numbers it shows."""

    html: Path
    pngs: list[Path]
    summary: dict[str, Any]

    def summary_line(self) -> str:
        """One line for a terminal, so a glance tells whether the run learned anything."""
        s = self.summary
        versions = ("-" if s["policy_version_min"] is None
                    else f"{s['policy_version_min']}-{s['policy_version_max']}")
        return (f"report: {s['groups']} groups, {s['trajectories']} trajectories, policy versions {versions}, "
                f"{s['learner_steps']} learner steps, mean reward {_fmt(s['reward_mean_first_version'], 4)} "
                f"(first version) -> {_fmt(s['reward_mean_last_version'], 4)} (last), "
                f"compile rate {_fmt(s['compile_rate'], 3)}, correct rate {_fmt(s['correct_rate'], 3)}, "
                f"{len(s['best_speedup_per_task'])} tasks with a correct kernel")


@dataclass(frozen=True)
class VersionStats:
    """The trajectories of one policy version's groups, reduced to what the curves show."""

    version: int
    groups: int
    trajectories: int
    reward_mean: float
    reward_max: float
    parse_rate: float     # code could be extracted (t.source is not None)
    compile_rate: float
    correct_rate: float


@dataclass(frozen=True)
class RunData:
    """Everything the figures and the page are drawn from, read once."""

    groups: list[Group]
    versions: list[VersionStats]
    version_speedups: dict[str, list[tuple[int, float]]]   # task id -> (policy version, speedup), correct kernels
    records: list[Record]

    @property
    def speedups(self) -> dict[str, list[float]]:
        """Task id -> the speedups of its correct kernels, without their versions."""
        return {task: [s for _v, s in points] for task, points in self.version_speedups.items()}


@dataclass(frozen=True)
class _FigureSpec:
    filename: str
    title: str
    missing: str                                  # what the page says when the figure is skipped
    draw: Callable[[RunData], Figure | None]      # None: the run holds no data for it


def write_report(run_dir: Path, out_dir: Path | None = None) -> Report:
    """Draw the run's figures to out_dir (default run_dir/report) and write report.html next to them.

    Raises FileNotFoundError when run_dir is missing and ValueError when it holds neither
    trajectories.jsonl nor metrics.jsonl (a mistyped path should fail loudly, not give an empty page).
    """
    run_dir = Path(run_dir)
    data = _read_run(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs: list[Path] = []
    sections: list[str] = []
    for spec in FIGURES:
        path = out_dir / spec.filename
        fig = spec.draw(data)
        if fig is None:
            path.unlink(missing_ok=True)   # a figure left by an earlier report would be stale
            sections.append(f'<h3>{html.escape(spec.title)}</h3>\n'
                            f'<p class="skipped">Skipped: {html.escape(spec.missing)}.</p>')
            continue
        fig.savefig(path, dpi=100)
        pngs.append(path)
        sections.append(f'<h3>{html.escape(spec.title)}</h3>\n'
                        f'<img src="{html.escape(spec.filename)}" alt="{html.escape(spec.title)}">')
    summary = summarize(data)
    page = out_dir / "report.html"
    page.write_text(_page(run_dir, summary, data.versions, data.speedups, sections), encoding="utf-8")
    return Report(html=page, pngs=pngs, summary=summary)


def _read_run(run_dir: Path) -> RunData:
    """Read both files of a run directory, checking first that it is one."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist or is not a directory")
    traj_path, metrics_path = run_dir / trajectories.FILENAME, run_dir / metrics.FILENAME
    if not traj_path.exists() and not metrics_path.exists():
        raise ValueError(f"{run_dir} does not look like a run directory: it holds neither "
                         f"{trajectories.FILENAME} nor {metrics.FILENAME}")
    groups = [group for _status, group in read_groups(traj_path)]
    return RunData(groups=groups, versions=version_stats(groups), version_speedups=speedups_by_version(groups),
                   records=read_metrics(run_dir))


def version_stats(groups: Sequence[Group]) -> list[VersionStats]:
    """Per policy version, in version order; a version whose groups hold no trajectory is left out."""
    by_version: dict[int, list[Group]] = {}
    for g in groups:
        by_version.setdefault(g.policy_version, []).append(g)
    out = []
    for version, gs in sorted(by_version.items()):
        trajs = [t for g in gs for t in g.trajectories]
        if not trajs:
            continue
        n = len(trajs)
        rewards = [t.reward for t in trajs]
        out.append(VersionStats(
            version=version, groups=len(gs), trajectories=n, reward_mean=statistics.fmean(rewards),
            reward_max=max(rewards), parse_rate=sum(t.source is not None for t in trajs) / n,
            compile_rate=sum(t.measurement is not None and t.measurement.compiled for t in trajs) / n,
            correct_rate=sum(t.measurement is not None and t.measurement.correct for t in trajs) / n))
    return out


def speedups_by_version(groups: Sequence[Group]) -> dict[str, list[tuple[int, float]]]:
    """(policy version, speedup) of every kernel that passed every gate, per task id in sorted order
    (tasks without one are absent): a flagged speedup is one the evaluator does not believe, so it is
    never a "best" and never a point of the trend."""
    out: dict[str, list[tuple[int, float]]] = {}
    for g in groups:
        for t in g.trajectories:
            m = t.measurement
            if m is not None and passed_every_gate(m):
                out.setdefault(g.task_id, []).append((g.policy_version, m.speedup))
    return dict(sorted(out.items()))


def summarize(data: RunData) -> dict[str, Any]:
    """The numbers of the page's summary table; a rate or mean is None when the run has no trajectory."""
    trajs = [t for g in data.groups for t in g.trajectories]
    n = len(trajs)
    return {
        "groups": len(data.groups),
        "trajectories": n,
        "policy_version_min": min((g.policy_version for g in data.groups), default=None),
        "policy_version_max": max((g.policy_version for g in data.groups), default=None),
        "learner_steps": max((r["step"] for r in data.records if _carries(r, "learner/loss")), default=0),
        "reward_mean_first_version": data.versions[0].reward_mean if data.versions else None,
        "reward_mean_last_version": data.versions[-1].reward_mean if data.versions else None,
        "compile_rate": sum(t.measurement is not None and t.measurement.compiled for t in trajs) / n if n else None,
        "correct_rate": sum(t.measurement is not None and t.measurement.correct for t in trajs) / n if n else None,
        "best_speedup_per_task": {task: max(s) for task, s in data.speedups.items()},
    }


# ---- figures ------------------------------------------------------------------------------------

def _carries(record: Record, key: str) -> bool:
    """Whether a metrics record holds a number for `key` (keys vary per record; null means no value)."""
    return isinstance(record.get(key), (int, float))


def _new_figure(width: float = 7.0, height: float = 4.0) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)   # Agg explicitly: renders to PNG without any display
    return fig


def _reward_figure(data: RunData) -> Figure | None:
    """Mean and max reward per policy version: is the policy improving, and is the best still rising?"""
    if not data.versions:
        return None
    fig = _new_figure()
    ax = fig.subplots()
    xs = [v.version for v in data.versions]
    ax.plot(xs, [v.reward_mean for v in data.versions], marker="o", label="mean")
    ax.plot(xs, [v.reward_max for v in data.versions], marker="^", label="max")
    ax.set(xlabel="policy version", ylabel="reward", title="Reward per policy version")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def _correctness_figure(data: RunData) -> Figure | None:
    """Parse, compile and correct rates per version: where in the pipeline completions are lost."""
    if not data.versions:
        return None
    fig = _new_figure()
    ax = fig.subplots()
    xs = [v.version for v in data.versions]
    # parsed last and dashed: when everything parsed compiles, both curves stay visible
    for label, attr, marker, style in (("compiled", "compile_rate", "o", "-"), ("correct", "correct_rate", "^", "-"),
                                       ("parsed", "parse_rate", "s", "--")):
        ax.plot(xs, [getattr(v, attr) for v in data.versions], marker=marker, linestyle=style, label=label)
    ax.set(xlabel="policy version", ylabel="fraction of trajectories", ylim=(-0.02, 1.02),
           title="Parse, compile and correct rates per policy version")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def _speedups_figure(data: RunData) -> Figure | None:
    """Box plot of correct kernels' speedups per task on a log axis; the line at 1.0 is the baseline."""
    if not data.speedups:
        return None
    tasks = list(data.speedups)
    fig = _new_figure(width=min(30.0, max(7.0, 0.6 * len(tasks) + 2.0)), height=5.0)
    ax = fig.subplots()
    positions = list(range(1, len(tasks) + 1))
    ax.boxplot([data.speedups[t] for t in tasks], positions=positions)
    for x, task in zip(positions, tasks):   # the points too: most tasks have only a few correct kernels
        ax.scatter([x] * len(data.speedups[task]), data.speedups[task], s=10, alpha=0.5, color="tab:blue")
    ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1, label="baseline (1.0x)")
    ax.set_yscale("log")
    ax.set_xticks(positions, tasks, rotation=45, ha="right", fontsize=8)
    ax.set(ylabel="speedup (log scale)", title="Speedups of correct kernels per task")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    return fig


def _speed_trend_figure(data: RunData) -> Figure | None:
    """Correct kernels' speedups against the policy version that wrote them, one colour per task, with
    each version's geometric mean joined: whether a task's kernels get faster as the policy trains, which
    the pooled reward curve cannot show when versions sample different tasks."""
    if not data.version_speedups:
        return None
    fig = _new_figure(width=8.0, height=4.5)
    ax = fig.subplots()
    for task, points in data.version_speedups.items():
        by_version: dict[int, list[float]] = {}
        for version, speedup in points:
            by_version.setdefault(version, []).append(speedup)
        versions = sorted(by_version)
        geomeans = [math.exp(statistics.fmean(math.log(s) for s in by_version[v])) for v in versions]
        line, = ax.plot(versions, geomeans, marker="o", label=task)
        ax.scatter([v for v, _s in points], [s for _v, s in points], s=10, alpha=0.35, color=line.get_color())
    ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    ax.set(xlabel="policy version", ylabel="speedup (log scale; line: geometric mean)",
           title="Speedups of correct kernels per policy version")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if len(data.version_speedups) <= LEGEND_MAX_TASKS:
        ax.legend(fontsize=8)
    return fig


def _idle_keys(records: Sequence[Record]) -> list[str]:
    """The idle ratios present (pipeline/idle/*, learner/idle_ratio), then timer utilisation."""
    present = {k for r in records for k in r if _carries(r, k)}
    idle = sorted(k for k in present if k.startswith("pipeline/idle/") or k == "learner/idle_ratio")
    return idle + ([TIMER_UTIL_KEY] if TIMER_UTIL_KEY in present else [])


def _idle_figure(data: RunData) -> Figure | None:
    """Idle ratios against wall time: which side of the pipeline waits for the other."""
    keys = _idle_keys(data.records)
    if not keys:
        return None
    t0 = min(r["time"] for r in data.records)
    fig = _new_figure()
    ax = fig.subplots()
    for key in keys:
        rs = [r for r in data.records if _carries(r, key)]
        ax.plot([(r["time"] - t0) / 60 for r in rs], [r[key] for r in rs], marker=".", label=key)
    ax.set(xlabel="minutes since the first record", ylabel="fraction", ylim=(-0.02, 1.02),
           title="Idle ratios and timer utilisation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _learner_figure(data: RunData) -> Figure | None:
    """One small plot per learner key against step; keys differ in scale, so they never share an axis."""
    keys = [k for k in LEARNER_KEYS if any(_carries(r, k) for r in data.records)]
    if not keys:
        return None
    cols = min(2, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig = _new_figure(width=5.0 * cols, height=2.8 * rows)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax, key in zip(axes, keys):
        rs = [r for r in data.records if _carries(r, key)]
        ax.plot([r["step"] for r in rs], [r[key] for r in rs], marker=".")
        ax.set(xlabel="step", title=key)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes[len(keys):]:   # the empty cell of an odd count
        ax.set_visible(False)
    return fig


FIGURES = (
    _FigureSpec("reward.png", "Reward per policy version", "no scored groups in trajectories.jsonl",
                _reward_figure),
    _FigureSpec("correctness.png", "Parse, compile and correct rates", "no scored groups in trajectories.jsonl",
                _correctness_figure),
    _FigureSpec("speedups.png", "Speedups of correct kernels per task", "no correct kernel with a speedup",
                _speedups_figure),
    _FigureSpec("speed_trend.png", "Speedups of correct kernels per policy version",
                "no correct kernel with a speedup", _speed_trend_figure),
    _FigureSpec("idle.png", "Idle ratios and timer utilisation",
                "no pipeline/idle/*, learner/idle_ratio or pipeline/util/timers values in metrics.jsonl",
                _idle_figure),
    _FigureSpec("learner.png", "Learner curves", "no learner/* loss, KL, clip, entropy or grad-norm values "
                "in metrics.jsonl", _learner_figure),
)


# ---- page ---------------------------------------------------------------------------------------

def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML table; every cell is escaped, since task ids and paths come from the run's files."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>\n" for row in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}</table>"


def _page(run_dir: Path, s: dict[str, Any], versions: Sequence[VersionStats],
          speedups: dict[str, list[float]], sections: Sequence[str]) -> str:
    """The whole page; its only external references are the PNGs next to it."""
    versions_seen = "-" if s["policy_version_min"] is None else f"{s['policy_version_min']}-{s['policy_version_max']}"
    summary = _table(("quantity", "value"), [
        ("groups", str(s["groups"])),
        ("trajectories", str(s["trajectories"])),
        ("policy versions seen", versions_seen),
        ("learner steps", str(s["learner_steps"])),
        ("mean reward, first version", _fmt(s["reward_mean_first_version"], 4)),
        ("mean reward, last version", _fmt(s["reward_mean_last_version"], 4)),
        ("compile rate", _fmt(s["compile_rate"], 3)),
        ("correct rate", _fmt(s["correct_rate"], 3)),
    ])
    per_version = (_table(
        ("policy version", "groups", "trajectories", "mean reward", "max reward", "parse rate", "compile rate",
         "correct rate"),
        [(str(v.version), str(v.groups), str(v.trajectories), _fmt(v.reward_mean, 4), _fmt(v.reward_max, 4),
          _fmt(v.parse_rate, 3), _fmt(v.compile_rate, 3), _fmt(v.correct_rate, 3)) for v in versions])
        if versions else '<p class="skipped">No scored groups.</p>')
    best = (_table(("task", "best speedup", "correct kernels with a speedup"),
                   [(task, f"{s['best_speedup_per_task'][task]:.3f}x", str(len(xs))) for task, xs in speedups.items()])
            if speedups else '<p class="skipped">No correct kernel with a speedup yet.</p>')
    title = f"rl-kernels report: {html.escape(run_dir.name)}"
    figures = "\n".join(sections)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 80em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }}
img {{ max-width: 100%; }}
.skipped {{ color: #a33; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>Run directory: <code>{html.escape(str(run_dir))}</code></p>
<h2>Summary</h2>
{summary}
<h2>Per policy version</h2>
{per_version}
<h2>Best speedup per task</h2>
{best}
<h2>Figures</h2>
{figures}
</body>
</html>
"""
