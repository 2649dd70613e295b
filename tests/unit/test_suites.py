"""Suites: the built-in suite, KernelBench checkouts (fake, same layout), hgemm delegation, ids."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

import pytest

from rl_kernels.tasks import TaskError, get_task, list_suites, load_suite, load_task_program, scan_task_dir
from rl_kernels.tasks.suites import builtin_manifest
from rl_kernels.types import Task

MATMUL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a single square matrix multiplication (C = A * B)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 64


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []  # No special initialization inputs needed
'''

GEMM_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a matrix multiplication and applies ReLU."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.gemm(x))


batch_size = 8
in_features = 32
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


def _fake_checkout(tmp_path: Path) -> Path:
    """A KernelBench clone's layout: <clone>/KernelBench/level<N>/<n>_<Name>.py plus non-task files."""
    clone = tmp_path / "KernelBench"
    files = {
        "KernelBench/level1/1_Square_matrix_multiplication_.py": MATMUL,
        "KernelBench/level2/12_Gemm_ReLU.py": GEMM_RELU,
        "KernelBench/level1/__init__.py": "",
        "KernelBench/level1/helpers.py": "def helper():\n    return 1\n",
        "KernelBench/level2/99_Broken.py": "class Model(:\n",
        "src/eval.py": "import os\n",
        "KernelBench/level1/__pycache__/junk.py": MATMUL,
    }
    for rel, text in files.items():
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        (clone / rel).write_text(text)
    return clone


def test_list_suites() -> None:
    assert list_suites() == ["builtin", "hgemm", "hgemm/fp16", "hgemm/fp32"]


def test_builtin_suite_matches_manifest() -> None:
    tasks = load_suite("builtin")
    manifest = builtin_manifest()
    assert len(tasks) >= 12
    assert [t.id for t in tasks] == [f"builtin/{name}" for name in manifest]
    for task in tasks:
        assert task.kind == "module"
        assert task.description == manifest[task.id.removeprefix("builtin/")]
        assert set(task.seeds) == {"cpu", "cuda"}
        assert not task.allow_torch_ops


@pytest.mark.parametrize("task", load_suite("builtin"), ids=lambda t: t.id)
def test_builtin_task_programs(task: Task) -> None:
    program = load_task_program(task)
    assert program.get_variant_inputs is not None, f"{task.id} needs get_variant_inputs()"
    main = program.get_inputs()
    variants = program.get_variant_inputs()
    assert 1 <= len(variants) <= 2
    for inputs in [main, *variants]:
        assert all(x.dtype.is_floating_point for x in inputs)
    for variant in variants:
        assert [x.shape for x in variant] != [x.shape for x in main], f"{task.id}: variant repeats main shape"


def test_checkout_loads_unchanged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clone = _fake_checkout(tmp_path)
    with caplog.at_level(logging.WARNING):
        tasks = load_suite(str(clone))
    assert [t.id for t in tasks] == ["KernelBench/level1/1_Square_matrix_multiplication_",
                                     "KernelBench/level2/12_Gemm_ReLU"]
    assert tasks[0].description.startswith("Simple model that performs a single square")
    assert "helpers.py" in caplog.text and "99_Broken.py" in caplog.text and "syntax error" in caplog.text
    model = load_task_program(tasks[1]).model_cls(16, 8)
    assert model.gemm.out_features == 8


def test_level_dir_ids_and_skip_report(tmp_path: Path) -> None:
    clone = _fake_checkout(tmp_path)
    tasks, skipped = scan_task_dir(clone / "KernelBench" / "level1")
    assert [t.id for t in tasks] == ["level1/1_Square_matrix_multiplication_"]
    assert [(s.path.name, "missing Model" in s.reason) for s in skipped] == [("helpers.py", True)]


def test_unknown_suite_and_empty_dir(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="unknown suite 'nope'"):
        load_suite("nope")
    with pytest.raises(TaskError, match="holds no KernelBench-format task files"):
        load_suite(str(tmp_path))


def test_get_task_by_id_and_path(tmp_path: Path) -> None:
    assert get_task("builtin/softmax").id == "builtin/softmax"
    clone = _fake_checkout(tmp_path)
    path = clone / "KernelBench/level1/1_Square_matrix_multiplication_.py"
    assert get_task(str(path)).id == "level1/1_Square_matrix_multiplication_"


def test_get_task_unknown_lists_close_matches() -> None:
    with pytest.raises(TaskError, match="close matches: builtin/softmax"):
        get_task("builtin/sofmax")
    with pytest.raises(TaskError, match="unknown task 'zzz'"):
        get_task("zzz")


def test_hgemm_delegation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fake = types.ModuleType("rl_kernels.tasks.hgemm")
    fake.hgemm_suite = lambda accumulators=("fp16", "fp32"): calls.append(accumulators) or []
    fake.hgemm_task = lambda task_id: Task(id=task_id, kind="hgemm")
    monkeypatch.setitem(sys.modules, "rl_kernels.tasks.hgemm", fake)
    load_suite("hgemm")
    load_suite("hgemm/fp32")
    assert calls == [("fp16", "fp32"), ("fp32",)]
    assert get_task("hgemm/fp16/128_256_64").kind == "hgemm"
