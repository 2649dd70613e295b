"""Held-out figures: the arithmetic of pass@k and the geomean, and `rl-kernels heldout` on a run
directory with a real (tiny) policy sampled on the held-out tasks only."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from tiny_model import save_tiny_llama

from rl_kernels.cli import main
from rl_kernels.config import dump_config, load_config
from rl_kernels.heldout import TaskTally, heldout_metrics, summarize
from rl_kernels.types import Measurement


def _m(correct: bool, speedup: float | None = None, rejected: str | None = None) -> Measurement:
    return Measurement(task="t", backend="cpu", mode="kernel", compiled=rejected != "compile_error",
                       correct=correct, speedup=speedup, rejected=rejected)


def test_pass_at_k_rates_and_the_geomean_over_solved_tasks() -> None:
    a, b, c = TaskTally("a"), TaskTally("b"), TaskTally("c")
    a.add(None, _m(True, 2.0))
    a.add(None, _m(True, 0.5))
    a.add("no_code_block", None)
    a.add(None, _m(False, rejected="incorrect"))
    b.add(None, _m(True, 8.0))
    b.add(None, dataclasses.replace(_m(True, 400.0), flagged="speedup beyond the roofline"))   # correct, not believed
    for _ in range(4):
        c.add(None, _m(False, rejected="compile_error"))
    s = summarize([a, b, c], version=3)
    assert s["pass@1"] == pytest.approx((2 / 4 + 2 / 2 + 0) / 3)
    assert s["pass@k"] == pytest.approx(2 / 3) and s["k"] == 4
    assert s["samples"] == 10 and s["parse_rate"] == pytest.approx(9 / 10)
    assert s["compile_rate"] == pytest.approx(5 / 10) and s["correct_rate"] == pytest.approx(4 / 10)
    # best per task, never a flagged speedup
    assert s["solved"] == 2 and s["geomean_speedup"] == pytest.approx(math.sqrt(2.0 * 8.0))
    assert a.outcomes == {"correct": 2, "no_code_block": 1, "incorrect": 1}
    assert set(heldout_metrics(s)) == {f"heldout/{k}" for k in ("pass@1", "pass@k", "parse_rate", "compile_rate",
                                                                 "correct_rate", "solved", "geomean_speedup")}


def test_the_heldout_command_samples_only_held_out_tasks_and_appends_a_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    model = save_tiny_llama(tmp_path / "tiny")
    cfg = load_config(None, [f"run_dir={run}", f"policy.model={model}", "policy.max_new_tokens=8",
                             "suite=hgemm/fp32", "split.heldout=[hgemm/fp32/64_64_256]", "split.samples=2",
                             f"eval.build.cache_dir={tmp_path / 'cache'}"])
    (run / "config.yaml").write_text(dump_config(cfg))
    assert main(["heldout", str(run), "--json"]) == 0
    out = capsys.readouterr()
    # the last line: DeepSpeed's logger, created while this test built the tiny model, writes to the
    # stdout of that moment (a fresh `rl-kernels heldout --json` prints the JSON alone)
    summary = json.loads(out.out.strip().splitlines()[-1])
    assert summary["version"] == 0 and summary["tasks"] == 1 and summary["samples"] == 2
    assert [t["task_id"] for t in summary["per_task"]] == ["hgemm/fp32/64_64_256"]
    assert sum(summary["per_task"][0]["outcomes"].values()) == 2
    assert "held-out 1/1 hgemm/fp32/64_64_256" in out.err                 # progress as it happens
    lines = (run / "heldout.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["samples"] == 2
    assert main(["heldout", str(run), "--version", "5"]) == 2
    assert "no published adapter v5" in capsys.readouterr().err
    assert main(["heldout", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
