"""The built-in seeds: plain, correct ModelNew solutions for every built-in task.

Fast checks run every seed file with `load_inline` stubbed out (structure, weight parity with the
reference Model, no torch compute).  The slow check really builds each cpu seed and compares it with
the reference on the task's inputs and variant inputs.  cuda seeds are only checked statically here
(they need a GPU; each nvcc build with torch headers takes minutes on 2 cores).
"""

from __future__ import annotations

import ast
import re
import types
from typing import Any

import pytest
import torch
import torch.utils.cpp_extension

from rl_kernels.tasks import load_suite, load_task_program
from rl_kernels.types import Task

TASKS = load_suite("builtin")
# C++ may only name these from the torch/ATen namespaces: allocation, the tensor type, the dtype,
# and (cuda) the current stream.  Any other `torch::`/`at::` name would be torch doing the work.
ALLOWED_NAMESPACE_NAMES = {"Tensor", "empty", "empty_like", "kFloat32", "cuda"}
FORWARD_ALLOWED_METHODS = {"contiguous"}


def _exec_seed(source: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a seed file with load_inline replaced by a recorder; returns (namespace, load_inline kwargs)."""
    recorded: dict[str, Any] = {}

    def fake_load_inline(**kwargs: Any) -> types.SimpleNamespace:
        recorded.update(kwargs)
        return types.SimpleNamespace()

    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", fake_load_inline)
    namespace: dict[str, Any] = {}
    exec(compile(source, "<seed>", "exec"), namespace)
    return namespace, recorded


def _as_text(sources: str | list[str] | None) -> str:
    return "\n".join(sources) if isinstance(sources, list) else (sources or "")


def _forward_calls_are_allowed(source: str) -> list[str]:
    """Calls in ModelNew.forward other than `ext.<fn>(...)` and `.contiguous()`."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    forward = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    bad = []
    for node in ast.walk(forward):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and (
            func.attr in FORWARD_ALLOWED_METHODS or (isinstance(func.value, ast.Name) and func.value.id == "ext")
        ):
            continue
        bad.append(ast.unparse(func))
    return bad


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach() for p in model.parameters()] + [b.detach() for b in model.buffers()]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_seed_structure_and_weights(task: Task, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    source = task.seeds[backend]
    namespace, kwargs = _exec_seed(source, monkeypatch)
    cpp, cuda = _as_text(kwargs.get("cpp_sources")), _as_text(kwargs.get("cuda_sources"))
    assert kwargs["name"] == f"rlk_{task.id.replace('/', '_')}_{backend}"
    assert kwargs["functions"], "the extension must bind its functions"
    for fn in kwargs["functions"]:
        assert re.search(rf"\b{fn}\s*\(", cpp), f"{fn} is not declared in cpp_sources"
    if backend == "cpu":
        assert not cuda
    else:
        assert "__global__" in cuda and "<<<" in cuda
    used = set(re.findall(r"\b(?:torch|at)::(\w+)", cpp + cuda))
    assert used <= ALLOWED_NAMESPACE_NAMES, f"torch compute in C++: {sorted(used - ALLOWED_NAMESPACE_NAMES)}"
    assert _forward_calls_are_allowed(source) == []

    program = load_task_program(task)
    init = program.get_init_inputs()
    torch.manual_seed(7)
    reference = program.model_cls(*init)
    torch.manual_seed(7)
    candidate = namespace["ModelNew"](*init)
    ref_params, cand_params = _params(reference), _params(candidate)
    assert [p.shape for p in cand_params] == [p.shape for p in ref_params]
    assert all(torch.equal(a, b) for a, b in zip(ref_params, cand_params)), "weights differ under the same seed"


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_cpu_seed_matches_reference(task: Task) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(task.seeds["cpu"], f"<cpu seed {task.id}>", "exec"), namespace)  # builds the extension
    program = load_task_program(task)
    init = program.get_init_inputs()
    torch.manual_seed(0)
    reference = program.model_cls(*init)
    torch.manual_seed(0)
    candidate = namespace["ModelNew"](*init)
    for inputs in [program.get_inputs(), *program.get_variant_inputs()]:
        with torch.no_grad():
            expected, got = reference(*inputs), candidate(*inputs)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
