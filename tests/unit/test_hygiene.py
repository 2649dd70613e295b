"""Task hygiene: degenerate tasks are flagged with the right reason; real tasks stay clean."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rl_kernels.tasks import load_module_task, load_suite
from rl_kernels.tasks import hygiene
from rl_kernels.tasks.hygiene import HygieneReport, check_task_hygiene, filter_tasks
from rl_kernels.types import HgemmSpec, Task

TEMPLATE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return {expr}


def get_inputs():
    return [torch.randn(64, 32), torch.randn(64, 32)]


def get_init_inputs():
    return []
'''


def _task(tmp_path: Path, name: str, expr: str) -> Task:
    path = tmp_path / "degenerate" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEMPLATE.format(expr=expr))
    return load_module_task(path)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("x - x", "near_zero_output"),
        ("(x - x) + 1e-9 * y", "near_zero_output"),
        ("torch.full_like(x, 3.0)", "constant_output"),
        ("torch.softmax(x, dim=-1).sum(dim=-1)", "constant_output"),
        ("torch.tanh(x * 1e4) * 0 + torch.ones_like(y)", "constant_output"),
        ("x * 2.0 + 1.0", "ignores_input_1"),
        ("y.exp() + 0 * x", "ignores_input_0"),
        ("torch.log(x)", "non_finite_output"),
    ],
)
def test_degenerate_tasks_are_flagged(tmp_path: Path, expr: str, reason: str) -> None:
    report = check_task_hygiene(_task(tmp_path, "t", expr))
    assert report.degenerate
    assert any(r.startswith(reason) for r in report.reasons), report.reasons


def test_healthy_task_is_clean(tmp_path: Path) -> None:
    report = check_task_hygiene(_task(tmp_path, "ok", "torch.relu(x) * y + 1e-3 * y"))
    assert not report.degenerate and report.reasons == []
    assert set(report.stats["input_sensitivity"]) == {"0", "1"}


def test_hgemm_tasks_are_clean() -> None:
    task = Task(id="hgemm/fp16/64_64_64", kind="hgemm", hgemm=HgemmSpec(64, 64, 64, "fp16"))
    assert check_task_hygiene(task) == HygieneReport(task.id, False, [], {"kind": "hgemm"})


def test_cache_reuses_reports_and_respects_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = _task(tmp_path, "zero", "x - x")
    cache = tmp_path / "cache"
    first = check_task_hygiene(task, cache_dir=cache)
    assert len(list(cache.glob("*.json"))) == 1

    def fail(*args: object, **kwargs: object) -> HygieneReport:
        raise AssertionError("cached report should have been used")

    monkeypatch.setattr(hygiene, "_run_checks", fail)
    renamed = Task(id="other/zero", kind="module", source=task.source)
    cached = check_task_hygiene(renamed, cache_dir=cache)
    assert cached.task_id == "other/zero"
    assert (cached.degenerate, cached.reasons) == (first.degenerate, first.reasons)
    with pytest.raises(AssertionError, match="cached report"):
        check_task_hygiene(task, cache_dir=cache, near_zero_rel=1e-3)


def test_filter_tasks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good, bad = _task(tmp_path, "good", "x * y"), _task(tmp_path, "bad", "x - x")
    reports = [check_task_hygiene(good), check_task_hygiene(bad)]
    with caplog.at_level(logging.WARNING):
        assert filter_tasks([good, bad], reports) == [good]
    assert "excluding degenerate task degenerate/bad" in caplog.text
    assert filter_tasks([good, bad], reports, include_degenerate=True) == [good, bad]
    with pytest.raises(ValueError, match="no hygiene report for task"):
        filter_tasks([good, bad], reports[:1])


@pytest.mark.parametrize("task", load_suite("builtin"), ids=lambda t: t.id)
def test_builtin_tasks_are_clean(task: Task) -> None:
    report = check_task_hygiene(task)
    assert not report.degenerate, report.reasons
