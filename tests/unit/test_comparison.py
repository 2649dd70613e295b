"""`rl-kernels compare`'s arithmetic on hand-made measurements (rates, fast_p, geomeans against each
baseline, the pooled figure and its ratio, bootstrap intervals, undefined geomeans, collapses) and
its plan (versions, tasks, the one prompt per task), all without Ray."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rl_kernels.archive import KernelArchive, source_sha256
from rl_kernels.comparison import Outcome, compare_outcomes, outcome_of, speedups_of
from rl_kernels.comparison_plan import archived_seed, compare_prompt, parse_versions, plan_comparison, prompt_mode
from rl_kernels.comparison_report import markdown_table
from rl_kernels.config import CompareConfig, ConfigError, load_config
from rl_kernels.rollout import SEED_POLICY_VERSION
from rl_kernels.tasks import get_task
from rl_kernels.types import Measurement

CFG = CompareConfig(bootstrap_resamples=400)
EAGER_ONLY = {"a": ["eager"], "b": ["eager"]}


def _m(speedup: float | None = None, *, baseline: str = "eager", baselines: dict[str, float] | None = None,
       rejected: str | None = None, flagged: str | None = None, untrusted: bool = False) -> Measurement:
    """A measurement: correct with `speedup` against the timed `baseline`, or rejected."""
    correct = rejected is None
    return Measurement(task="t", backend="cpu", mode="kernel", compiled=rejected != "compile_error", correct=correct,
                       rejected=rejected, speedup=speedup if correct else None, baseline=baseline if correct else None,
                       baselines_ms=baselines or ({baseline: 1.0} if correct else {}), flagged=flagged,
                       extra={"unstable_measurement": True} if untrusted else {})


def _cell(task: str, version: int, *ms: Measurement | None) -> list[Outcome]:
    return [outcome_of(task, version, i, None, "no_code_block", None) if m is None
            else outcome_of(task, version, i, f"kernel {i}", None, m) for i, m in enumerate(ms)]


def test_speedups_against_every_baseline_anchor_on_the_timed_pair() -> None:
    # timed against compile (the faster baseline, 0.5 ms): 1.0x; eager took 1.0 ms, so 2.0x against it
    m = _m(1.0, baseline="compile", baselines={"eager": 1.0, "compile": 0.5})
    assert speedups_of(m) == pytest.approx({"eager": 2.0, "compile": 1.0})
    assert speedups_of(_m(3.0, untrusted=True)) == {}                    # an unsettled speed is not believed
    assert outcome_of("a", 0, 0, "src", None, _m(3.0, untrusted=True)).flagged
    assert speedups_of(_m(3.0, flagged="above the ceiling")) == {}       # nor an implausible one
    assert outcome_of("a", 0, 0, "src", None, _m(3.0, flagged="above the ceiling")).flagged
    assert not outcome_of("a", 0, 0, "src", None, _m(3.0)).flagged
    assert speedups_of(_m(rejected="incorrect")) == {}


def test_rates_fast_p_and_geomeans_per_cell() -> None:
    two = {"eager": 1.0, "compile": 0.5}
    v0 = _cell("a", 0, _m(1.0, baseline="compile", baselines=two),     # 2.0x eager, 1.0x compile
               _m(0.25, baseline="compile", baselines=two),            # 0.5x eager, 0.25x compile
               _m(5.0, flagged="speedup above the ceiling"),            # correct, speed not believed
               None, _m(rejected="compile_error"), _m(rejected="incorrect"))
    v1 = _cell("a", 1, *[_m(1.3, baseline="compile", baselines=two)] * 3)   # 2.6x eager, 1.3x compile
    s = compare_outcomes(v0 + v1, ["a"], [0, 1], {"a": ["eager", "compile"]}, CFG)
    c0, c1 = s["cells"]
    assert (c0["completions"], c0["parsed"], c0["compiled"], c0["correct"]) == (6, 5, 4, 3)
    assert c0["parse_rate"] == pytest.approx(5 / 6) and c0["compile_rate"] == pytest.approx(4 / 6)
    assert c0["correct_rate"]["value"] == pytest.approx(3 / 6)
    # fast_p over ALL completions, against the reference (eager): only the 2.0x kernel
    assert c0["fast_1.0"]["value"] == pytest.approx(1 / 6) and c0["fast_1.2"]["value"] == pytest.approx(1 / 6)
    assert c0["geomean"]["eager"]["value"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert c0["geomean"]["compile"]["value"] == pytest.approx(math.sqrt(1.0 * 0.25))
    assert c0["geomean"]["eager"]["kernels"] == 2
    assert c0["outcomes"] == {"correct": 2, "flagged": 1, "no_code_block": 1, "compile_error": 1, "incorrect": 1}
    assert c1["fast_1.2"]["value"] == 1.0 and c1["geomean"]["compile"]["value"] == pytest.approx(1.3)
    assert not c0["collapsed"] and not c1["collapsed"]
    # every completion's outcome is in the JSON, with its speedups
    assert len(s["outcomes"]) == 9 and s["outcomes"][0]["speedups"] == pytest.approx({"eager": 2.0, "compile": 1.0})
    assert s["outcomes"][0]["kernel"] == source_sha256("kernel 0")[:12] and s["outcomes"][3]["kernel"] is None


def test_a_flagged_speed_counts_in_no_geomean_nor_fast_p_but_in_its_own_column() -> None:
    """A slow kernel that makes its timing erratic reads 8x: it must not lift its version."""
    v0 = _cell("a", 0, _m(1.0), _m(1.0))
    v1 = _cell("a", 1, _m(1.0), _m(8.0, untrusted=True), _m(9.0, flagged="speedup above the ceiling"))
    s = compare_outcomes(v0 + v1, ["a"], [0, 1], {"a": ["eager"]}, CFG)
    c0, c1 = s["cells"]
    assert c1["geomean"]["eager"]["value"] == pytest.approx(1.0) and c1["geomean"]["eager"]["kernels"] == 1
    assert c1["fast_1.2"]["value"] == 0.0 and c1["correct"] == 3
    assert (c0["flagged"], c1["flagged"]) == (0, 2)
    assert [p["flagged"] for p in s["pooled"]] == [0, 2]
    assert s["ratios"][0]["value"] == pytest.approx(1.0)
    table = markdown_table(s)
    assert "| flagged |" in table.splitlines()[0] and "| 2 |" in table


def test_pooled_geomean_weighs_tasks_equally_and_the_ratio_compares_versions() -> None:
    # task a: v0 one kernel at 1x, v1 one at 4x; task b: v0 many kernels at 1x, v1 many at 1x
    outs = (_cell("a", 0, _m(1.0), None, None, None) + _cell("a", 1, _m(4.0), None, None, None)
            + _cell("b", 0, *[_m(1.0)] * 4) + _cell("b", 1, *[_m(1.0)] * 4))
    s = compare_outcomes(outs, ["a", "b"], [0, 1], EAGER_ONLY, CFG)
    p0, p1 = s["pooled"]
    assert p0["geomean"]["eager"]["value"] == pytest.approx(1.0)
    # exp(mean(ln 4, ln 1)): tasks weigh the same, so b's four kernels do not pull it towards 1
    assert p1["geomean"]["eager"]["value"] == pytest.approx(2.0)
    assert p1["correct_rate"]["value"] == pytest.approx(5 / 8)
    (ratio,) = s["ratios"]
    assert (ratio["version"], ratio["against"], ratio["baseline"]) == (1, 0, "eager")
    assert ratio["value"] == pytest.approx(2.0) and ratio["tasks"] == ["a", "b"] and ratio["dropped"] == {}


def test_bootstrap_intervals_bracket_the_estimate_and_repeat_with_the_seed() -> None:
    speeds = [0.6, 0.8, 0.9, 1.1, 1.2, 1.5, 1.7, 2.0]
    outs = (_cell("a", 0, *[_m(x) for x in speeds], None, _m(rejected="incorrect"))
            + _cell("a", 1, *[_m(1.4 * x) for x in speeds], None, None))
    s = compare_outcomes(outs, ["a"], [0, 1], {"a": ["eager"]}, CFG)
    for iv in [s["cells"][0]["correct_rate"], s["cells"][0]["fast_1.0"], s["cells"][1]["geomean"]["eager"],
               s["pooled"][1]["geomean"]["eager"], s["ratios"][0]]:
        assert iv["low"] <= iv["value"] <= iv["high"], iv
        assert iv["low"] < iv["high"], iv
    assert s["ratios"][0]["value"] == pytest.approx(1.4)
    assert s["ratios"][0]["defined"] == 1.0    # every resample of 8 kernels in 10 has one
    again = compare_outcomes(outs, ["a"], [0, 1], {"a": ["eager"]}, CFG)
    assert again["ratios"] == s["ratios"] and again["cells"] == s["cells"]
    other = compare_outcomes(outs, ["a"], [0, 1], {"a": ["eager"]}, CFG.model_copy(update={"seed": 1}))
    assert other["ratios"][0]["low"] != s["ratios"][0]["low"]
    wider = compare_outcomes(outs, ["a"], [0, 1], {"a": ["eager"]}, CFG.model_copy(update={"confidence": 0.99}))
    assert wider["ratios"][0]["low"] <= s["ratios"][0]["low"] and wider["ratios"][0]["high"] >= s["ratios"][0]["high"]


def test_tasks_without_correct_kernels_and_a_collapse_are_said_not_crashed_on() -> None:
    outs = (_cell("a", 0, _m(2.0), _m(1.0)) + _cell("a", 1, _m(rejected="incorrect"), None)   # collapses
            + _cell("b", 0, None, None) + _cell("b", 1, None, None)                              # never correct
            + _cell("c", 0, _m(1.0), None) + _cell("c", 1, _m(1.5), None))
    s = compare_outcomes(outs, ["a", "b", "c"], [0, 1], {**EAGER_ONLY, "c": ["eager"]}, CFG)
    cells = {(c["task"], c["version"]): c for c in s["cells"]}
    assert cells["a", 1]["collapsed"] and not cells["a", 0]["collapsed"] and not cells["b", 1]["collapsed"]
    assert s["collapsed"] == [{"task": "a", "version": 1}]
    assert cells["b", 0]["geomean"]["eager"] == {"value": None, "low": None, "high": None, "defined": 0.0,
                                                 "kernels": 0}
    (ratio,) = s["ratios"]
    assert ratio["tasks"] == ["c"] and ratio["value"] == pytest.approx(1.5)
    assert ratio["dropped"] == {"a": "no believed speedup against eager in v1",
                                "b": "no believed speedup against eager in any version"}
    table = markdown_table(s)
    assert "COLLAPSED" in table and "no kernel passed: geomean undefined" in table
    assert "v1 / v0 pooled geomean vs eager 1.50x [" in table
    assert "b: no believed speedup against eager in any version" in table
    # nothing correct anywhere: every figure undefined, still a table
    none = compare_outcomes(_cell("b", 0, None) + _cell("b", 1, None), ["b"], [0, 1], {"b": ["eager"]}, CFG)
    assert none["ratios"][0]["value"] is None and "undefined" in markdown_table(none)


def test_compare_refuses_what_it_cannot_compare() -> None:
    with pytest.raises(ValueError, match="two or more distinct versions"):
        compare_outcomes([], ["a"], [0], {"a": ["eager"]}, CFG)
    with pytest.raises(ValueError, match="outside the compared"):
        compare_outcomes(_cell("z", 0, None), ["a"], [0, 1], {"a": ["eager"]}, CFG)


def test_versions_default_to_the_start_and_the_newest_and_are_checked() -> None:
    assert parse_versions(None, [1, 2, 5]) == [0, 5]
    assert parse_versions("5,0", [1, 2, 5]) == [0, 5]
    with pytest.raises(ConfigError, match="no published adapter under adapters/"):
        parse_versions(None, [])
    with pytest.raises(ConfigError, match=r"version\(s\) \[3\].*published: \[1, 2, 5\]"):
        parse_versions("0,3", [1, 2, 5])
    with pytest.raises(ConfigError, match="two or more distinct"):
        parse_versions("2,2", [2])
    with pytest.raises(ConfigError, match="comma-separated"):
        parse_versions("v0,v2", [2])


def test_the_plan_fixes_tasks_prompt_and_one_seed_per_task(tmp_path: Path) -> None:
    cfg = load_config(None, [f"run_dir={tmp_path}", "prompts.mode=plain", "compare.samples=3"])
    tasks = [get_task("builtin/softmax"), get_task("builtin/rmsnorm")]
    published = {2: tmp_path / "adapters" / "policy-v2"}
    plan = plan_comparison(cfg, tasks, published, versions=None, tasks=["builtin/rmsnorm"], heldout=False, name=None)
    assert plan.versions == [0, 2] and plan.adapters == {0: None, 2: published[2]}
    assert [t.id for t in plan.tasks] == ["builtin/rmsnorm"] and plan.name == "v0-v2" and plan.prompt == "plain"
    assert "1 training task(s) (builtin/rmsnorm) x 3 completions per version = 6 completions" in plan.headline()
    again = plan_comparison(cfg, tasks, published, versions="0,2", tasks=None, heldout=True, name=None)
    assert again.seeds["builtin/rmsnorm"] == plan.seeds["builtin/rmsnorm"] != again.seeds["builtin/softmax"]
    assert again.name == "v0-v2-heldout"
    with pytest.raises(ConfigError, match=r"--tasks \['builtin/gelu'\] are not among the run's training tasks"):
        plan_comparison(cfg, tasks, published, versions=None, tasks=["builtin/gelu"], heldout=False, name=None)
    with pytest.raises(ConfigError, match="--name"):
        plan_comparison(cfg, tasks, published, versions=None, tasks=None, heldout=False, name="../x")
    assert prompt_mode(cfg) == "plain"
    assert prompt_mode(load_config(None, ["prompts.num_exemplars=1"])) == "contrastive"
    assert prompt_mode(load_config(None, ["compare.prompt=plain"])) == "plain"


def test_the_contrastive_prompt_shows_the_archived_seed_or_falls_back_to_plain(tmp_path: Path) -> None:
    task = get_task("builtin/softmax")
    path = tmp_path / "archive.sqlite"
    assert archived_seed(path, task, "cpu") is None and not path.exists()   # no archive: none made
    seed_m = Measurement(task=task.id, backend="cpu", mode="kernel", compiled=True, correct=True, speedup=0.73,
                         baseline="eager", baseline_ms=1.0, candidate_ms=1.37, reward=1.0)
    with KernelArchive(path) as archive:
        archive.add(task.id, task.seeds["cpu"], seed_m, policy_version=SEED_POLICY_VERSION, backend="cpu")
    seed = archived_seed(path, task, "cpu")
    assert seed is not None and seed.speedup == pytest.approx(0.73) and seed.source == task.seeds["cpu"]
    messages, mode = compare_prompt(task, "cpu", "contrastive", seed)
    assert mode == "contrastive" and "0.73" in messages[-1]["content"]
    assert compare_prompt(task, "cpu", "contrastive", None)[1] == "plain_fallback"
    assert compare_prompt(task, "cpu", "plain", seed)[1] == "plain"


def test_the_command_says_what_is_wrong_before_anything_starts(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from tiny_model import save_tiny_llama

    from rl_kernels.cli import main
    from rl_kernels.config import dump_config

    run = tmp_path / "run"
    run.mkdir()
    model = save_tiny_llama(tmp_path / "tiny")
    (run / "config.yaml").write_text(dump_config(load_config(None, [f"run_dir={run}", f"policy.model={model}"])))
    assert main(["compare", str(run)]) == 2
    assert "no published adapter under adapters/" in capsys.readouterr().err
    (run / "adapters" / "policy-v3").mkdir(parents=True)
    assert main(["compare", str(run), "--versions", "0,2"]) == 2
    assert "no published adapter for version(s) [2] under adapters/ (published: [3])" in capsys.readouterr().err
    assert main(["compare", str(run), "--tasks", "builtin/nope"]) == 2
    assert "--tasks ['builtin/nope'] are not among the run's training tasks" in capsys.readouterr().err
