"""The built-in ladder: the seeds and the faster (or slower) rungs beside them, every built-in task.

Fast checks run every rung file with `load_inline` stubbed out (structure, weight parity with the
reference Model, no torch compute) and read every analysis.  The slow check really builds each cpu
rung and compares it with the reference on the task's inputs and variant inputs; the gpu check does
the same for the cuda rungs (each nvcc build with torch headers takes minutes on 2 cores).
"""

from __future__ import annotations

import ast
import re
import types
from typing import Any

import pytest
import torch
import torch.utils.cpp_extension

from rl_kernels.prompts.parsing import ANSWER_SECTIONS, CODE_SECTION
from rl_kernels.sft.examples import analysis_sections
from rl_kernels.tasks import load_suite, load_task_program
from rl_kernels.tasks.ladder import MIN_RUNGS, SEED_RUNG, Rung, check_rung, load_ladder
from rl_kernels.types import Task

TASKS = load_suite("builtin")
RUNGS = {backend: load_ladder(backend, TASKS) for backend in ("cpu", "cuda")}
ALL_RUNGS = RUNGS["cpu"] + RUNGS["cuda"]
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


def _rung_id(rung: Rung) -> str:
    return f"{rung.backend}-{rung.task.id.split('/', 1)[1]}-{rung.name}"


def _extension_name(rung: Rung) -> str:
    base = f"rlk_{rung.task.id.replace('/', '_')}_{rung.backend}"
    return base if rung.name == SEED_RUNG else f"{base}_{rung.name}"


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_task_has_a_ladder_of_distinct_solutions(backend: str) -> None:
    by_task: dict[str, list[Rung]] = {}
    for rung in RUNGS[backend]:
        by_task.setdefault(rung.task.id, []).append(rung)
    assert sorted(by_task) == sorted(t.id for t in TASKS)
    for task_id, rungs in by_task.items():
        assert len(rungs) >= MIN_RUNGS, task_id
        assert len({r.source.strip() for r in rungs}) == len(rungs), f"{task_id}: two rungs are the same file"
        assert rungs[0].name == SEED_RUNG and rungs[0].source == rungs[0].task.seeds[backend]


@pytest.mark.parametrize("rung", ALL_RUNGS, ids=_rung_id)
def test_rung_analysis_has_the_answer_prose_sections(rung: Rung) -> None:
    prose = [s for s in ANSWER_SECTIONS if s != CODE_SECTION]
    sections = analysis_sections(rung.analysis)
    assert sorted(sections) == sorted(prose), f"{rung.origin}: sections {sorted(sections)}"
    assert all(len(text.split()) >= 12 for text in sections.values()), f"{rung.origin}: a section says too little"
    assert "```" not in rung.analysis, f"{rung.origin}: the analysis carries code; the code is the rung file"


@pytest.mark.parametrize("rung", ALL_RUNGS, ids=_rung_id)
def test_rung_structure_and_weights(rung: Rung, monkeypatch: pytest.MonkeyPatch) -> None:
    task, backend, source = rung.task, rung.backend, rung.source
    namespace, kwargs = _exec_seed(source, monkeypatch)
    cpp, cuda = _as_text(kwargs.get("cpp_sources")), _as_text(kwargs.get("cuda_sources"))
    assert kwargs["name"] == _extension_name(rung)
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


def _matches_reference(rung: Rung, device: str) -> None:
    verdict = check_rung(rung, device).comparison   # builds the extension, float64 reference, every input set
    assert verdict.ok, f"{rung.origin}: {verdict.reason}: {verdict.detail}"


@pytest.mark.slow
@pytest.mark.parametrize("rung", RUNGS["cpu"], ids=_rung_id)
def test_cpu_rung_matches_reference(rung: Rung) -> None:
    _matches_reference(rung, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("rung", RUNGS["cuda"], ids=_rung_id)
def test_cuda_rung_matches_reference(rung: Rung) -> None:
    _matches_reference(rung, "cuda")
