"""KernelBench-format task files: parsing without running, clear errors, executing in the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rl_kernels.tasks.module import TaskError, load_module_task, load_task_program
from rl_kernels.types import Task

PLAIN = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU.

    More text.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


if __name__ == "__main__":
    raise SystemExit("task files must not run their main block when loaded")
'''

EXTENDED = PLAIN.replace("batch_size = 16", "ALLOW_TORCH_OPS = True\nbatch_size = 16") + '''

def get_variant_inputs():
    return [[torch.randn(3, 5)]]
'''


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "level1" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_plain_kernelbench_file(tmp_path: Path) -> None:
    task = load_module_task(_write(tmp_path, "19_ReLU.py", PLAIN))
    assert task.id == "level1/19_ReLU"
    assert task.kind == "module"
    assert task.source == PLAIN
    assert task.allow_torch_ops is False
    assert task.description == "Simple model that performs a ReLU."
    assert task.seeds == {}


def test_explicit_id_and_extensions(tmp_path: Path) -> None:
    task = load_module_task(_write(tmp_path, "relu.py", EXTENDED), task_id="mine/relu")
    assert task.id == "mine/relu"
    assert task.allow_torch_ops is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PLAIN.replace("class Model(", "class Other("), "missing Model"),
        (PLAIN.replace("def get_inputs(", "def inputs("), "missing get_inputs"),
        (PLAIN.replace("def get_init_inputs(", "def init_inputs("), "missing get_init_inputs"),
        (PLAIN + "\ndef broken(:\n", "syntax error at line"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path, "bad.py", text)
    with pytest.raises(TaskError) as err:
        load_module_task(path)
    assert expected in str(err.value)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        load_module_task(tmp_path / "nope.py")


def test_program_runs_reference(tmp_path: Path) -> None:
    program = load_task_program(load_module_task(_write(tmp_path, "relu.py", PLAIN)))
    assert program.get_variant_inputs is None
    model = program.model_cls(*program.get_init_inputs())
    (x,) = program.get_inputs()
    assert torch.equal(model(x), torch.relu(x))


def test_program_variant_inputs(tmp_path: Path) -> None:
    program = load_task_program(load_module_task(_write(tmp_path, "relu.py", EXTENDED)))
    assert program.get_variant_inputs is not None
    assert program.get_variant_inputs()[0][0].shape == (3, 5)


def test_fresh_namespace_each_time(tmp_path: Path) -> None:
    task = load_module_task(_write(tmp_path, "relu.py", PLAIN))
    assert load_task_program(task).model_cls is not load_task_program(task).model_cls


def test_model_must_be_a_module() -> None:
    source = "Model = 3\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n"
    with pytest.raises(TaskError, match="nn.Module"):
        load_task_program(Task(id="x/y", kind="module", source=source))


def test_hgemm_task_has_no_program() -> None:
    with pytest.raises(TaskError, match="not a module task"):
        load_task_program(Task(id="hgemm/fp16/1_1_1", kind="hgemm"))
