"""The simulation's inputs fitted to a run directory, and the figures read from one: a small run
written with the real writers (TrajectoryStore, MetricsSink, the resolved config), every number
worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_kernels.buffer_restore import RESUMED
from rl_kernels.config import MetricsConfig, SimulationConfig, dump_config, load_config
from rl_kernels.metrics import MetricsSink
from rl_kernels.run_dir import CONFIG_FILE
from rl_kernels.simulation_fit import (RunRecord, busiest, carried_overrides, comparison, fit_simulation, read_run,
                                       run_figures, run_steps, simulate_section)
from rl_kernels.trajectories import Group, Trajectory, TrajectoryStore
from rl_kernels.types import Measurement

REPO = Path(__file__).resolve().parents[2]
COUNTS = ["cluster.num_generators=2", "cluster.num_compilers=3", "cluster.num_timers=1", "policy.group_size=4",
          "rollout.batch_groups=2", "rollout.max_staleness=1", "rollout.dedupe_group_sources=true"]


def _m(*, compiled: bool, correct: bool = False, speedup: float | None = None, build: float, cached: bool = False,
       eval_s: float = 0.0) -> Measurement:
    return Measurement(task="t", backend="cpu", mode="kernel", compiled=compiled, correct=correct, speedup=speedup,
                       build_seconds=build, build_cached=cached, eval_seconds=eval_s)


def _t(i: int, tokens: int, source: str | None, m: Measurement | None) -> Trajectory:
    return Trajectory(index=i, completion="c", source=source, reward=0.0, measurement=m, token_ids=[1] * tokens)


def _groups() -> list[Group]:
    """8 completions, 4 builds paid: A twice in g1 (deduplicated), B failing to build, C a cache hit."""
    a = _m(compiled=True, correct=True, speedup=2.0, build=4.0, eval_s=1.0)
    g1 = [_t(0, 10, "A", a), _t(1, 20, "A", a), _t(2, 30, None, None), _t(3, 40, "B", _m(compiled=False, build=2.0))]
    g2 = [_t(0, 50, "C", _m(compiled=True, build=6.0, cached=True, eval_s=3.0)),
          _t(1, 10, "D", _m(compiled=True, correct=True, speedup=1.0, build=8.0, eval_s=2.0)),
          _t(2, 10, None, None), _t(3, 10, None, None)]
    return [Group(f"g{k}", "t", 0, trajs) for k, trajs in enumerate([g1, g2])]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / CONFIG_FILE).write_text(dump_config(load_config(REPO / "configs" / "local.yaml", COUNTS)))
    with TrajectoryStore(run) as store:
        for g in _groups():
            store.append_group(g, "accepted")
        store.append({"event": RESUMED, "step": 1, "version": 1, "requeued": 0})
    with MetricsSink(run, MetricsConfig(wandb=False), run_config={}) as sink:
        sink.log({"learner/step_s": 5.0, "learner/publish_s": 1.0, "learner/weight_sync_s": 0.2,
                  "learner/busy_ratio": 0.5, "learner/idle_ratio": 0.4, "learner/steps_per_hour": 20.0}, step=2)
        sink.log({"pipeline/util/generators": 0.5, "pipeline/util/compilers": 0.2, "pipeline/util/timers": 0.7,
                  "pipeline/tokens_per_s": 6.0, "pipeline/candidates_per_min": 12.0,
                  "pipeline/idle/producer_blocked": 0.3}, step=2)
        sink.log({"learner/step_s": 3.0, "learner/publish_s": 1.0, "learner/weight_sync_s": 0.9,
                  "learner/busy_ratio": 0.6, "learner/idle_ratio": 0.35, "learner/steps_per_hour": 30.0}, step=3)
        sink.log({"learner/weight_sync_s": 0.4}, step=3)
    return run


def test_inputs_are_the_runs_own_measurements_in_the_simulations_units(run_dir: Path) -> None:
    fitted = {i.name: i for i in fit_simulation(read_run(run_dir), floor_s=1e-3)}
    assert all(i.derived for i in fitted.values()), [i for i in fitted.values() if not i.derived]
    values = {name: i.value for name, i in fitted.items()}
    # longest completions 40 + 50 of 180 tokens; 6 tokens/s over 0.5 x 2 generators busy
    assert values["tokens_per_s"] == pytest.approx(6.0 * 90 / 180 / 1.0)
    assert values["completion_tokens"] == pytest.approx({"median": 15.0, "p90": 43.0})
    # uncached builds 2, 4, 8 s (median 4, p90 7.2), three of the four builds paid missed the cache
    assert values["build_s"] == pytest.approx({"median": 3.0, "p90": 5.4})
    assert values["eval_s"] == pytest.approx({"median": 2.0, "p90": 2.8})
    # a batch: 2 groups of 90 tokens; a step: (5 + 1 + 3 + 1) / 2 s
    assert values["learner_tokens_per_s"] == pytest.approx(180 / 5.0)
    assert values["adapter_load_s"] == pytest.approx(0.4)
    assert (values["parse_rate"], values["compile_rate"], values["correct_rate"]) == pytest.approx((0.5, 0.75, 2 / 3))
    assert values["speedup"] == pytest.approx({"median": 1.5, "p90": 1.9})


def test_a_run_without_measurements_keeps_every_default_and_says_so(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_text(dump_config(load_config(REPO / "configs" / "local.yaml", COUNTS)))
    fitted = fit_simulation(read_run(tmp_path), floor_s=1e-3)
    defaults = SimulationConfig().model_dump(mode="json")
    assert [i.name for i in fitted if i.derived] == []
    assert all(i.value == defaults[i.name] and "default" in i.how for i in fitted)


def test_figures_of_the_last_process_and_a_simulated_runs_per_simulated_time(run_dir: Path) -> None:
    run = read_run(run_dir)
    assert run_steps(run) == 2      # step 3, resumed at step 1
    real = run_figures(run)
    assert real == pytest.approx({"steps_per_hour": 30.0, "groups_per_hour": 180.0, "candidates_per_min": 12.0,
                                  "tokens_per_s": 6.0, "util_generators": 0.5, "util_compilers": 0.2,
                                  "util_timers": 0.7, "learner_busy": 0.6, "learner_idle": 0.35,
                                  "producer_blocked": 0.3})
    sim_cfg = load_config(REPO / "configs" / "scale_sim.yaml",
                          ["cluster.simulate.time_scale=10", "policy.group_size=4"])
    simulated = run_figures(RunRecord(sim_cfg, run.groups, run.rows, 0))
    assert simulated["steps_per_hour"] == pytest.approx(3.0) and simulated["tokens_per_s"] == pytest.approx(0.6)
    assert simulated["util_timers"] == real["util_timers"]
    rows = {r["figure"]: r for r in comparison(real, simulated)}
    assert rows["groups_per_hour"]["error_pct"] == pytest.approx(-90.0) and rows["util_timers"]["error_pct"] == 0.0
    assert busiest(real) == "timers (0.70)"


def test_the_simulated_config_carries_the_runs_counts_and_the_fitted_inputs(run_dir: Path) -> None:
    run = read_run(run_dir)
    section = simulate_section(fit_simulation(run, floor_s=1e-3), time_scale=4.0)
    cfg = load_config(REPO / "configs" / "scale_sim.yaml",
                      [*carried_overrides(run.cfg), f"cluster.simulate={json.dumps(section)}"])
    c = cfg.cluster
    assert (c.num_generators, c.num_compilers, c.num_timers, cfg.policy.group_size) == (2, 3, 1, 4)
    assert (cfg.rollout.batch_groups, cfg.rollout.max_staleness, cfg.rollout.tasks) == (2, 1, run.cfg.rollout.tasks)
    assert c.simulate is not None and c.simulate.time_scale == 4.0
    assert c.simulate.learner_tokens_per_s == pytest.approx(36.0)
