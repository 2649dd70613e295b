"""`rl-kernels report`: synthetic run directories written with the real writers, drawn to PNGs and a page.

Expected numbers are computed here from the groups the test wrote, not through the report's helpers.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from rl_kernels.cli import main
from rl_kernels.config import MetricsConfig
from rl_kernels.metrics import FILENAME as METRICS_FILE
from rl_kernels.metrics import MetricsSink
from rl_kernels.report import FIGURES, LEGEND_MAX_TASKS, RunData, speedups_by_version, write_report
from rl_kernels.trajectories import FILENAME as TRAJ_FILE
from rl_kernels.trajectories import Group, Trajectory, TrajectoryStore
from rl_kernels.types import Measurement

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TASKS = ("builtin/softmax", "hgemm/fp16/64_64_64", "odd/<b>&task")   # the last one must be escaped
VERSIONS = (0, 1, 2)
ALL_PNGS = {"reward.png", "correctness.png", "speedups.png", "speed_trend.png", "idle.png", "learner.png"}


def _traj(index: int, reward: float, *, parsed: bool = True, compiled: bool = False, correct: bool = False,
          speedup: float | None = None) -> Trajectory:
    """A scored completion; unparsed means no code, hence no measurement."""
    m = (Measurement(task="t", backend="cpu", mode="kernel", compiled=compiled, correct=correct,
                     rejected=None if correct else "incorrect", speedup=speedup, reward=reward)
         if parsed else None)
    return Trajectory(index=index, completion="", source="code" if parsed else None, reward=reward,
                      measurement=m, detail="" if parsed else "no_code_block")


def _groups() -> list[Group]:
    """Per version and task: one unparsed, one compiled but wrong, one correct kernel; rewards rise with the version."""
    groups = []
    for v in VERSIONS:
        for k, task in enumerate(TASKS):
            groups.append(Group(f"g{v}-{k}", task, v, [
                _traj(0, 0.0, parsed=False),
                _traj(1, 0.05 * v, compiled=True),
                _traj(2, 0.2 + 0.1 * v + 0.01 * k, compiled=True, correct=True, speedup=0.5 + v + 0.3 * k),
            ]))
    return groups


def _write_trajectories(run_dir: Path, groups: list[Group]) -> None:
    """Every status counts in the report; a torn last line mimics a run still being written."""
    with TrajectoryStore(run_dir) as store:
        for i, g in enumerate(groups):
            store.append_group(g, "accepted" if i % 2 else "filtered/zero_variance")
        store.append({"event": "consumed", "group_ids": [groups[0].group_id], "version": 0})
    with open(run_dir / TRAJ_FILE, "ab") as f:
        f.write(b'{"status": "accepted", "gro')


def _write_metrics(run_dir: Path) -> None:
    """Pipeline gauges and learner steps 1-4, keys varying per record, then a torn line."""
    with MetricsSink(run_dir, MetricsConfig(wandb=False), run_config={}) as sink:
        for step in range(1, 5):
            sink.log({"pipeline/idle/generators": 0.1 * step, "pipeline/idle/producer_blocked": 0.05,
                      "pipeline/util/timers": 0.7, "note": "gauge"}, step=step)
            sink.log({"learner/loss": 1.0 / step, "learner/kl": 0.01 * step, "learner/idle_ratio": 0.3,
                      "learner/entropy": None}, step=step)
        sink.log({"pipeline/idle/generators": 0.5}, step=9)   # no learner/loss: not a learner step
    with open(run_dir / METRICS_FILE, "a") as f:
        f.write('{"step": 10, "ti')


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    _write_trajectories(run_dir, _groups())
    _write_metrics(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def full_report(full_run: Path) -> tuple[list[Path], str, dict]:
    report = write_report(full_run)
    return report.pngs, report.html.read_text(encoding="utf-8"), report.summary


def test_every_figure_is_drawn_as_a_png(full_run: Path, full_report: tuple[list[Path], str, dict]) -> None:
    pngs, page, _ = full_report
    assert {p.name for p in pngs} == ALL_PNGS == {spec.filename for spec in FIGURES}
    for png in pngs:
        assert png.parent == full_run / "report"
        assert png.read_bytes().startswith(PNG_MAGIC)
        assert f'<img src="{png.name}"' in page
    assert "Skipped" not in page


def test_page_shows_per_version_mean_rewards(full_report: tuple[list[Path], str, dict]) -> None:
    _, page, summary = full_report
    groups = _groups()
    means = {v: statistics.fmean(t.reward for g in groups if g.policy_version == v for t in g.trajectories)
             for v in VERSIONS}
    assert len(set(means.values())) == len(VERSIONS)   # else the check below could pass by accident
    for mean in means.values():
        assert f"<td>{mean:.4f}</td>" in page
    assert summary["reward_mean_first_version"] == pytest.approx(means[0])
    assert summary["reward_mean_last_version"] == pytest.approx(means[2])


def test_speed_trend_points_are_each_correct_kernel_with_its_version() -> None:
    groups = _groups()
    groups[0].trajectories[2].measurement.flagged = "implausible"   # a flagged speedup is no point of the trend
    expected = {task: [(v, 0.5 + v + 0.3 * k) for v in VERSIONS if (v, k) != (0, 0)]
                for k, task in enumerate(TASKS)}
    assert speedups_by_version(groups) == dict(sorted(expected.items()))


def test_speed_trend_names_tasks_only_while_the_legend_fits() -> None:
    draw = next(spec.draw for spec in FIGURES if spec.filename == "speed_trend.png")

    def legend_for(n_tasks: int) -> object:
        groups = [Group(f"g{k}-{v}", f"suite/task{k}", v, [_traj(0, 1.0, compiled=True, correct=True, speedup=1.0 + v)])
                  for k in range(n_tasks) for v in VERSIONS]
        data = RunData(groups=groups, versions=[], version_speedups=speedups_by_version(groups), records=[])
        return draw(data).axes[0].get_legend()

    assert legend_for(LEGEND_MAX_TASKS) is not None
    assert legend_for(LEGEND_MAX_TASKS + 1) is None


def test_summary_counts_every_group_and_learner_step(full_report: tuple[list[Path], str, dict]) -> None:
    _, page, summary = full_report
    groups = _groups()
    trajs = [t for g in groups for t in g.trajectories]
    assert summary["groups"] == len(groups) and summary["trajectories"] == len(trajs)
    assert (summary["policy_version_min"], summary["policy_version_max"]) == (0, 2)
    assert summary["learner_steps"] == 4
    assert summary["compile_rate"] == pytest.approx(2 / 3) and summary["correct_rate"] == pytest.approx(1 / 3)
    best = {task: max(t.measurement.speedup for g in groups if g.task_id == task for t in g.trajectories
                      if t.measurement is not None and t.measurement.correct)
            for task in TASKS}
    assert summary["best_speedup_per_task"] == pytest.approx(best)
    assert f"<td>{best['builtin/softmax']:.3f}x</td>" in page
    assert "<td>0-2</td>" in page


def test_page_escapes_text_from_the_data(full_report: tuple[list[Path], str, dict]) -> None:
    _, page, _ = full_report
    assert "odd/&lt;b&gt;&amp;task" in page
    assert "<b>&task" not in page


def test_trajectories_only_run_skips_metric_figures(tmp_path: Path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "elsewhere"
    _write_trajectories(run_dir, _groups())
    report = write_report(run_dir, out)
    assert {p.name for p in report.pngs} == {"reward.png", "correctness.png", "speedups.png", "speed_trend.png"}
    assert not (out / "idle.png").exists() and not (out / "learner.png").exists()
    page = report.html.read_text(encoding="utf-8")
    assert report.html == out / "report.html"
    assert page.count('class="skipped"') == 2
    assert "Skipped: no learner/*" in page and "Skipped: no pipeline/idle/*" in page
    assert report.summary["learner_steps"] == 0


def test_missing_run_dir_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_run"
    with pytest.raises(FileNotFoundError, match="no_such_run"):
        write_report(missing)


def test_directory_without_run_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not look like a run directory.*trajectories.jsonl.*metrics.jsonl"):
        write_report(tmp_path)
    assert not (tmp_path / "report").exists()


def test_cli_report(full_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(full_run), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "out" / "report.html") in out
    assert "report: 9 groups, 27 trajectories, policy versions 0-2, 4 learner steps" in out
    assert main(["report", str(tmp_path / "no_such_run")]) == 2
    assert "no_such_run" in capsys.readouterr().err
