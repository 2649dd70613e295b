"""KernelBench-format module tasks: a Python file defining `Model`, `get_inputs()`, `get_init_inputs()`.

Loading a task only parses the file (no code runs), so a whole KernelBench checkout can be listed
cheaply and a broken file is reported with its name instead of crashing the suite.  The code runs
only in `load_task_program`, which the evaluation subprocess calls.

Our optional extensions (plain KernelBench files simply lack them):
  * `get_variant_inputs()` -> list of input lists with other shapes; the evaluator runs candidates
    on them too, to catch kernels that hard-code the task's shape.
  * `ALLOW_TORCH_OPS = True` opts a task into torch-level rewrites (-> `Task.allow_torch_ops`).
"""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rl_kernels.types import Task

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


class TaskError(ValueError):
    """A task file or task id is unusable; the message names the file/id and what is wrong."""


@dataclass(frozen=True)
class TaskProgram:
    """The executed task file: what the evaluator needs to build and feed the reference model."""

    model_cls: type
    get_inputs: Callable[[], list[Any]]
    get_init_inputs: Callable[[], list[Any]]
    get_variant_inputs: Callable[[], list[list[Any]]] | None = None


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names bound at module level by def/class/assignment/import (what `exec` would define)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _allow_torch_ops(tree: ast.Module) -> bool:
    """True only for a literal top-level `ALLOW_TORCH_OPS = True` (opt-in must be explicit)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if any(isinstance(t, ast.Name) and t.id == "ALLOW_TORCH_OPS" for t in node.targets):
                return node.value.value is True
    return False


def _model_docstring(tree: ast.Module) -> str:
    """First line of Model's docstring: a free one-line description for KernelBench files."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            doc = ast.get_docstring(node) or ""
            return doc.strip().splitlines()[0].strip() if doc.strip() else ""
    return ""


def parse_module_task(source: str, task_id: str, where: str, description: str = "",
                      seeds: dict[str, str] | None = None) -> Task:
    """Validate `source` as a task file (without running it) and wrap it in a Task."""
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise TaskError(f"task file {where}: syntax error at line {exc.lineno}: {exc.msg}") from None
    missing = [n for n in REQUIRED_NAMES if n not in _top_level_names(tree)]
    if missing:
        raise TaskError(f"task file {where}: missing {', '.join(missing)} "
                        f"(a KernelBench task defines {', '.join(REQUIRED_NAMES)})")
    return Task(
        id=task_id,
        kind="module",
        source=source,
        seeds=dict(seeds or {}),
        allow_torch_ops=_allow_torch_ops(tree),
        description=description or _model_docstring(tree),
    )


def load_module_task(path: Path, task_id: str | None = None, description: str = "",
                     seeds: dict[str, str] | None = None) -> Task:
    """Load one KernelBench-format file; the id defaults to `<parent dir name>/<file stem>`."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"task file {path} does not exist")
    source = path.read_text()
    return parse_module_task(source, task_id or f"{path.resolve().parent.name}/{path.stem}", str(path),
                             description, seeds)


def load_task_program(task: Task) -> TaskProgram:
    """Execute the task source in a fresh module namespace (runs the task's top-level code)."""
    import torch.nn as nn  # deferred: listing tasks must not pay for importing torch

    if task.kind != "module":
        raise TaskError(f"task {task.id} is a {task.kind} task, not a module task")
    module = types.ModuleType("rl_kernels_task")
    code = compile(task.source, f"<task {task.id}>", "exec")
    exec(code, module.__dict__)  # noqa: S102 - task files are trusted reference code
    ns = module.__dict__
    model_cls = ns.get("Model")
    if not (isinstance(model_cls, type) and issubclass(model_cls, nn.Module)):
        raise TaskError(f"task {task.id}: Model must be an nn.Module subclass, got {model_cls!r}")
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(ns.get(name)):
            raise TaskError(f"task {task.id}: {name} must be a function")
    variants = ns.get("get_variant_inputs")
    if variants is not None and not callable(variants):
        raise TaskError(f"task {task.id}: get_variant_inputs must be a function")
    return TaskProgram(model_cls, ns["get_inputs"], ns["get_init_inputs"], variants)
