"""The static gate: reject reward hacks from the source text alone, before any build or GPU time.

hgemm candidates are one C++/CUDA translation unit; module candidates are Python (`ModelNew`)
whose kernels come from `torch.utils.cpp_extension.load_inline`.  The Python is checked with
`ast` (imports, dynamic code, monkeypatching, tensor subclasses, streams/graphs, torch compute in
the timed path) and every native source string it passes to `load_inline` with the C++ scanner in
`guards_cpp`.  The gate is a fast first line, not the proof: what it cannot see (numerics,
pointer/value caching through globals, skipped calls, partial or out-of-bounds work, constructs
hidden behind macros or runtime handles) is the dynamic checks' job, and the test candidates in
`tests/candidates/hacks/` document which layer catches which hack.

Precision downgrades (`.half()`, `.to(torch.float16)`, fp16 accumulation) are deliberately allowed
here: whether the result is accurate enough is a numerical question, answered by correctness.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Literal

from rl_kernels.evaluation.guards_cpp import (
    TENSOR_COMPUTE_METHODS,
    Finding,
    check_native,
    by_priority,
    first_by_priority,
    has_custom_kernel,
    has_hgemm_entry,
    hgemm_entry_diagnosis,
)
from rl_kernels.evaluation.flags import check_flags
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.evaluation.refusals import ALLOW_TORCH, NO_SETTING, TORCH_FIX, joined
from rl_kernels.types import Task

Backend = Literal["cpu", "cuda"]

# Modules a candidate may import (exact names; `from X import y` checks X).
ALLOWED_IMPORTS: frozenset[str] = frozenset(
    {"torch", "torch.nn", "torch.nn.functional", "torch.utils.cpp_extension", "math", "typing",
     "__future__"}
)
# Forbidden imports that have a more specific reason than `forbidden_import` (top-level package).
IMPORT_REASONS: dict[str, Reason] = {
    "threading": Reason.THREAD_SPAWN, "_thread": Reason.THREAD_SPAWN,
    "concurrent": Reason.THREAD_SPAWN, "asyncio": Reason.THREAD_SPAWN,
    "subprocess": Reason.PROCESS_SPAWN, "multiprocessing": Reason.PROCESS_SPAWN,
    "pty": Reason.PROCESS_SPAWN,
    "socket": Reason.NETWORK_ACCESS, "urllib": Reason.NETWORK_ACCESS, "http": Reason.NETWORK_ACCESS,
    "requests": Reason.NETWORK_ACCESS, "ftplib": Reason.NETWORK_ACCESS, "ssl": Reason.NETWORK_ACCESS,
}

# Builtins that execute or introspect code, and the reason a reference to them is rejected with.
BANNED_BUILTINS: dict[str, Reason] = {
    "eval": Reason.DYNAMIC_CODE, "exec": Reason.DYNAMIC_CODE, "compile": Reason.DYNAMIC_CODE,
    "__import__": Reason.DYNAMIC_CODE, "globals": Reason.DYNAMIC_CODE, "locals": Reason.DYNAMIC_CODE,
    "vars": Reason.DYNAMIC_CODE, "breakpoint": Reason.DYNAMIC_CODE, "__builtins__": Reason.DYNAMIC_CODE,
    "__loader__": Reason.DYNAMIC_CODE, "__spec__": Reason.DYNAMIC_CODE,
    "open": Reason.FILE_ACCESS, "input": Reason.FILE_ACCESS,
}
ALLOWED_DUNDERS: frozenset[str] = frozenset({"__init__", "__name__", "__main__", "__future__"})

# Torch paths (after resolving import aliases) rejected wherever they appear.  A rule matches the
# path itself or anything below it.  `None` as reason marks torch-level rewriting tools, rejected
# as `no_custom_kernel` unless the task allows torch ops.
TORCH_PATH_RULES: tuple[tuple[str, Reason | None], ...] = (
    ("torch.cuda.Stream", Reason.SIDE_STREAM), ("torch.cuda.stream", Reason.SIDE_STREAM),
    ("torch.cuda.streams", Reason.SIDE_STREAM), ("torch.cuda.set_stream", Reason.SIDE_STREAM),
    ("torch.cuda.ExternalStream", Reason.SIDE_STREAM), ("torch.cuda.StreamContext", Reason.SIDE_STREAM),
    ("torch.Stream", Reason.SIDE_STREAM), ("torch.cuda.default_stream", Reason.SIDE_STREAM),
    ("torch.cuda.graph", Reason.CUDA_GRAPH), ("torch.cuda.graphs", Reason.CUDA_GRAPH),
    ("torch.cuda.CUDAGraph", Reason.CUDA_GRAPH), ("torch.cuda.make_graphed_callables", Reason.CUDA_GRAPH),
    ("torch.Tensor._make_subclass", Reason.TENSOR_SUBCLASS),
    ("torch.Tensor._make_wrapper_subclass", Reason.TENSOR_SUBCLASS),
    ("torch.overrides", Reason.TENSOR_SUBCLASS), ("torch.utils._python_dispatch", Reason.TENSOR_SUBCLASS),
    ("torch._C._TensorBase", Reason.TENSOR_SUBCLASS), ("torch._C.TensorBase", Reason.TENSOR_SUBCLASS),
    ("torch.multiprocessing", Reason.PROCESS_SPAWN),
    ("torch.distributed", Reason.NETWORK_ACCESS), ("torch.hub", Reason.NETWORK_ACCESS),
    ("torch.load", Reason.FILE_ACCESS), ("torch.save", Reason.FILE_ACCESS),
    ("torch.from_file", Reason.FILE_ACCESS), ("torch.utils.cpp_extension.load", Reason.FILE_ACCESS),
    ("torch.ops.load_library", Reason.FILE_ACCESS),
    ("torch.library", Reason.MONKEYPATCH), ("torch.backends", Reason.MONKEYPATCH),
    ("torch.manual_seed", Reason.MONKEYPATCH), ("torch.seed", Reason.MONKEYPATCH),
    ("torch.random", Reason.MONKEYPATCH), ("torch.set_rng_state", Reason.MONKEYPATCH),
    ("torch.cuda.manual_seed", Reason.MONKEYPATCH), ("torch.cuda.manual_seed_all", Reason.MONKEYPATCH),
    ("torch.cuda.set_rng_state", Reason.MONKEYPATCH), ("torch.cuda.set_device", Reason.MONKEYPATCH),
    ("torch.use_deterministic_algorithms", Reason.MONKEYPATCH),
    ("torch.set_num_threads", Reason.MONKEYPATCH), ("torch.set_num_interop_threads", Reason.MONKEYPATCH),
    ("torch.compile", None), ("torch.jit", None), ("torch._dynamo", None), ("torch._inductor", None),
    ("torch.export", None), ("torch.fx", None), ("torch.ops", None),
)
# Standard-library modules that torch's own modules import and so expose as attributes
# (`torch.ctypes`, `torch.serialization.os`): reaching one through torch is the import it stands for.
MODULES_BEHIND_TORCH: dict[str, Reason] = {
    "ctypes": Reason.PROCESS_SPAWN, "subprocess": Reason.PROCESS_SPAWN, "multiprocessing": Reason.PROCESS_SPAWN,
    "signal": Reason.PROCESS_SPAWN, "os": Reason.FILE_ACCESS, "shutil": Reason.FILE_ACCESS,
    "pathlib": Reason.FILE_ACCESS, "io": Reason.FILE_ACCESS, "tempfile": Reason.FILE_ACCESS,
    "glob": Reason.FILE_ACCESS, "mmap": Reason.FILE_ACCESS, "pickle": Reason.FILE_ACCESS,
    "socket": Reason.NETWORK_ACCESS, "threading": Reason.THREAD_SPAWN, "sys": Reason.DYNAMIC_CODE,
    "importlib": Reason.DYNAMIC_CODE, "builtins": Reason.DYNAMIC_CODE, "inspect": Reason.DYNAMIC_CODE,
    "gc": Reason.DYNAMIC_CODE, "types": Reason.DYNAMIC_CODE, "marshal": Reason.DYNAMIC_CODE,
    "traceback": Reason.DYNAMIC_CODE,
}
# Attribute names rejected on any object (catches streams/graphs reached through introspection,
# and frames: a generator's gi_frame.f_back walks up to the evaluator's own frames).
BANNED_ATTRIBUTES: dict[str, Reason] = {
    **{attr: Reason.DYNAMIC_CODE for attr in (
        "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code", "f_back", "f_globals", "f_locals",
        "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next", "co_consts")},
    "Stream": Reason.SIDE_STREAM, "ExternalStream": Reason.SIDE_STREAM, "stream": Reason.SIDE_STREAM,
    "set_stream": Reason.SIDE_STREAM, "StreamContext": Reason.SIDE_STREAM,
    "CUDAGraph": Reason.CUDA_GRAPH, "graph": Reason.CUDA_GRAPH, "make_graphed_callables": Reason.CUDA_GRAPH,
    "_make_subclass": Reason.TENSOR_SUBCLASS, "_make_wrapper_subclass": Reason.TENSOR_SUBCLASS,
    "as_subclass": Reason.TENSOR_SUBCLASS,
}
# Private torch functions a candidate may call: pure arithmetic on a tensor's shape, which weight
# initialisation copied from nn.Linear / nn.ConvNd calls (6 of CUDA-L1's 70 released H100 kernels).
TORCH_PRIVATE_HELPERS: frozenset[str] = frozenset(
    {"torch.nn.init._calculate_fan_in_and_fan_out", "torch.nn.init._calculate_correct_fan"})
# Torch paths that are not compute: allocation, dtypes/devices, queries, module plumbing.  Any
# other torch path outside `__init__` is torch compute (`no_custom_kernel` unless allowed).
TORCH_NON_COMPUTE: frozenset[str] = frozenset(
    """torch.Tensor torch.Size torch.dtype torch.device torch.float16 torch.half torch.float32
    torch.float torch.float64 torch.double torch.bfloat16 torch.int8 torch.int16 torch.int32
    torch.int torch.int64 torch.long torch.uint8 torch.bool torch.empty torch.empty_like
    torch.empty_strided torch.zeros torch.zeros_like torch.ones torch.ones_like torch.full
    torch.full_like torch.tensor torch.is_tensor torch.numel torch.no_grad torch.inference_mode
    torch.is_grad_enabled torch.get_default_dtype torch.finfo torch.iinfo torch.cuda.current_stream
    torch.cuda.current_device torch.cuda.synchronize torch.cuda.is_available torch.cuda.device_count
    torch.cuda.get_device_properties torch.cuda.get_device_capability torch.cuda.device
    torch.cuda.Event    torch.nn.Module torch.nn.Parameter torch.nn.ParameterList torch.nn.ParameterDict torch.nn.Buffer
    torch.nn.init torch.autograd.Function torch.utils.cpp_extension.load_inline""".split()
)
TENSOR_BASES: frozenset[str] = frozenset(
    {"torch.Tensor", "torch.nn.Parameter", "torch.nn.Buffer", "torch._C.TensorBase", "torch._C._TensorBase"}
)
ALLOWED_BASES: frozenset[str] = frozenset({"torch.nn.Module", "torch.autograd.Function", "object"})
_LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
_NATIVE_KWARGS = ("cpp_sources", "cuda_sources")  # positional slots 1 and 2 of load_inline
_BLAS_LIBS = ("cublas", "cudnn", "blas", "mkl", "openblas", "dnnl")
_BUILTIN_NAMES: frozenset[str] = frozenset(dir(builtins))


@dataclass(frozen=True)
class GuardVerdict:
    """Outcome of the static gate; `reason is None` means passed."""

    reason: Reason | None
    detail: str

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class _Native:
    kind: str      # "cpp_sources" | "cuda_sources"
    index: int     # position in that argument's list
    text: str
    line: int      # Python line of the argument


def static_check(task: Task, source: str, backend: Backend, allow_torch_ops: bool = False) -> GuardVerdict:
    """Run the static gate on one candidate.  The task's own opt-in also allows torch ops."""
    allow = allow_torch_ops or task.allow_torch_ops
    if task.kind == "hgemm":
        findings = _check_hgemm(source, backend, allow)
    else:
        findings = _check_module(source, backend, allow)
    worst = first_by_priority(findings)
    if worst is None:
        return GuardVerdict(None, "passed")
    return GuardVerdict(worst.reason, joined([f.describe() for f in by_priority(findings)]))


def extract_native_sources(source: str) -> list[str]:
    """The C++/CUDA strings a module candidate passes to load_inline (literal ones only)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    natives, _ = _native_sources(tree, _Aliases(tree))
    return [n.text for n in natives]


def _check_hgemm(source: str, backend: Backend, allow: bool) -> list[Finding]:
    if not source.strip() or not has_hgemm_entry(source):
        return [Finding(Reason.MALFORMED, "entry point", 1, "source",
                        "the evaluator calls one entry function and finds none: " + hgemm_entry_diagnosis(source),
                        f"give your entry function that signature — {NO_SETTING}")]
    findings = check_native(source, "source", allow)
    if not allow and not has_custom_kernel([source], backend):
        findings.append(Finding(Reason.NO_CUSTOM_KERNEL, "no kernel", 1, "source", _no_kernel_why(backend),
                                _no_kernel_fix(backend)))
    return findings


def _no_kernel_why(backend: Backend) -> str:
    """What the gate looks for as the candidate's own kernel, which it did not find."""
    if backend == "cuda":
        return "no kernel of your own: the gate finds no __global__ function launched with <<<>>> or cudaLaunchKernel"
    return "no kernel of your own: the gate finds no loop storing through a raw data_ptr() pointer"


def _no_kernel_fix(backend: Backend) -> str:
    """A file without a kernel is either unfinished or a torch rewrite: name both ways out."""
    if backend == "cuda":
        return "write a __global__ kernel and launch it from the load_inline sources, or " + ALLOW_TORCH
    return "write the loop over data_ptr() in the load_inline C++ sources, or " + ALLOW_TORCH


def _check_module(source: str, backend: Backend, allow: bool) -> list[Finding]:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [Finding(Reason.MALFORMED, str(exc.msg), exc.lineno or 1, "python",
                        "the file must parse as Python 3", f"fix the syntax — {NO_SETTING}")]
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return [Finding(Reason.MALFORMED, "class ModelNew", 1, "python",
                        "no top-level class ModelNew, which the evaluator runs in place of the task's Model",
                        f"define `class ModelNew(nn.Module)` at module level — {NO_SETTING}")]
    aliases = _Aliases(tree)
    checker = _PythonChecker(aliases, allow)
    checker.visit(tree)
    findings = checker.findings
    natives, native_findings = _native_sources(tree, aliases)
    findings += native_findings
    for native in natives:
        where = f"{native.kind}[{native.index}] (python line {native.line})"
        findings += check_native(native.text, where, allow)
    if not allow and not has_custom_kernel([n.text for n in natives], backend):
        token = "load_inline sources" if natives else "no load_inline call"
        findings.append(Finding(Reason.NO_CUSTOM_KERNEL, token, 1, "python", _no_kernel_why(backend),
                                _no_kernel_fix(backend)))
    return findings


class _Aliases:
    """Maps local names to the dotted paths they stand for (imports and `x = torch.cuda` aliases)."""

    def __init__(self, tree: ast.Module):
        self.names: dict[str, str] = {}
        self.ext_names: set[str] = set()       # names bound to a load_inline(...) result
        self.classes: set[str] = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self.constants: dict[str, object] = {}  # module-level literal constants (for sources)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.names[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in ast.walk(tree):  # second pass: aliases of resolvable paths, ext handles
            if isinstance(node, ast.Assign):
                path = self.resolve(node.value)
                is_ext = (isinstance(node.value, ast.Call) and self.resolve(node.value.func) == _LOAD_INLINE
                          or _target_name(node.value) in self.ext_names)
                for target in node.targets:
                    name = _target_name(target)
                    if name is None:
                        continue
                    if is_ext:
                        self.ext_names.add(name)
                    elif path is not None and isinstance(target, ast.Name):
                        self.names.setdefault(name, path)
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.constants[target.id] = node.value.value

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted path of a Name/Attribute chain rooted at an alias, else None."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and _is_name(node.func, "getattr") and len(node.args) >= 2:
            base, name = self.resolve(node.args[0]), node.args[1]
            if base and isinstance(name, ast.Constant) and isinstance(name.value, str):
                return f"{base}.{name.value}"
        return None

    def is_ext(self, node: ast.AST) -> bool:
        """`ext` or `self.ext` bound to a load_inline result (its functions are the kernels)."""
        name = _target_name(node)
        return name is not None and name in self.ext_names


def _target_name(node: ast.AST) -> str | None:
    """`x` -> "x", `self.x` -> "self.x"; anything else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _matches(path: str, rule: str) -> bool:
    return path == rule or path.startswith(rule + ".")


def _builtin_text(name: str) -> tuple[str, str]:
    """Why a banned builtin is refused and what to write instead (empty: the reason's default)."""
    if BANNED_BUILTINS[name] is Reason.FILE_ACCESS:
        return "", f"embed the data in the source — {NO_SETTING}"
    return "", ""


def _torch_api_text(reason: Reason) -> tuple[str, str]:
    """Why a banned torch API is refused: global torch state for monkeypatching paths, else the reason's."""
    if reason is Reason.MONKEYPATCH:
        return ("it changes process-wide torch state (RNG, backend flags, threads, device) that the checks "
                "and the baseline rely on", f"remove the call — {NO_SETTING}")
    if reason is Reason.FILE_ACCESS:
        return "", f"build with load_inline from literal sources and embed data in the source — {NO_SETTING}"
    return "", ""


class _PythonChecker(ast.NodeVisitor):
    """Walks the candidate module; torch compute is checked everywhere except `__init__` bodies."""

    def __init__(self, aliases: _Aliases, allow_torch_ops: bool):
        self.aliases = aliases
        self.allow = allow_torch_ops
        self.findings: list[Finding] = []
        self.in_init = False
        self.function = ""                   # the enclosing function's name ("" at module level)
        self.in_handler = False              # inside an except handler (a fallback path)
        self.local_names: set[str] = set()   # names the enclosing function binds (they hide builtins)
        self.torch_layers: set[str] = set()  # self.X holding an nn layer or a torch function

    def _add(self, reason: Reason, node: ast.AST, token: str, why: str = "", fix: str = "") -> None:
        self.findings.append(Finding(reason, token, getattr(node, "lineno", 1), "python", why, fix))

    def _torch_work(self, node: ast.AST, token: str, what: str) -> None:
        """Torch doing the work: in an except handler that is a fallback for the kernel, which the
        user should hear about as such (CUDA-L1's released kernels wrap their kernel call this way)."""
        if self.in_handler:
            self._add(Reason.NO_CUSTOM_KERNEL, node, token,
                      f"{what} in the except handler of a try/except is a torch fallback for the kernel call: "
                      "it hides a kernel that fails to build or run, and torch's result and time would count "
                      "as the kernel's",
                      "remove the try/except so the kernel's errors surface, or " + ALLOW_TORCH)
            return
        scope = f"in {self.function}()" if self.function else "at module level"
        self._add(Reason.NO_CUSTOM_KERNEL, node, token,
                  f"{what} {scope} does the work instead of your kernel", TORCH_FIX)

    def visit_Try(self, node: ast.Try) -> None:
        for statement in (*node.body, *node.orelse, *node.finalbody):
            self.visit(statement)
        outer = self.in_handler
        self.in_handler = True
        for handler in node.handlers:
            self.visit(handler)
        self.in_handler = outer

    visit_TryStar = visit_Try  # type: ignore[assignment]

    # imports -----------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_import(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_import(node, module)
        for a in node.names:
            if a.name == "*":
                self._add(Reason.FORBIDDEN_IMPORT, node, f"from {module} import *",
                          "a star import brings in names the gate cannot resolve",
                          f"import the names you use explicitly — {NO_SETTING}")
            elif module == "torch.utils.cpp_extension" and a.name != "load_inline":
                self._add(Reason.FORBIDDEN_IMPORT, node, f"from {module} import {a.name}",
                          "only load_inline builds from sources the gate has read (load and the rest read files)",
                          f"build with load_inline and literal sources — {NO_SETTING}")
            elif module in ALLOWED_IMPORTS:
                self._check_path(node, f"{module}.{a.name}")

    def _check_import(self, node: ast.AST, module: str) -> None:
        if module not in ALLOWED_IMPORTS:
            root = module.split(".")[0]
            reason = IMPORT_REASONS.get(root, Reason.FORBIDDEN_IMPORT)
            fix = "remove the import" + (" (os.environ reads included)" if root == "os" else "")
            self._add(reason, node, f"import {module}", "", f"{fix} — {NO_SETTING}")

    # definitions -------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._check_def_name(node, node.name)
        self._visit_outside(node.args, node.decorator_list, node.returns)
        outer = self.in_init, self.function, self.in_handler, self.local_names
        self.in_init, self.function, self.in_handler = node.name == "__init__", node.name, False
        self.local_names = _function_locals(node)
        for statement in node.body:
            self.visit(statement)
        self.in_init, self.function, self.in_handler, self.local_names = outer

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_outside(node.args, [], None)
        outer = self.local_names
        self.local_names = _function_locals(node)
        self.visit(node.body)
        self.local_names = outer

    def _visit_outside(self, args: ast.arguments, decorators: list[ast.expr], returns: ast.expr | None) -> None:
        """What a def evaluates where it is defined, not in its own scope: decorators, defaults and
        annotations (a default `open=open` is the builtin, whatever the parameter is named)."""
        parts: list[ast.AST | None] = [*decorators, *args.defaults, *args.kw_defaults, returns]
        parts += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                  if a is not None]
        for part in parts:
            if part is not None:
                self.visit(part)

    def _check_def_name(self, node: ast.AST, name: str) -> None:
        if name in ("__torch_function__", "__torch_dispatch__"):
            self._add(Reason.TENSOR_SUBCLASS, node, f"def {name}")
        elif _is_dunder(name) and name not in ALLOWED_DUNDERS:
            self._add(Reason.DYNAMIC_CODE, node, f"def {name}",
                      "a dunder method other than __init__ hooks into how Python or torch treats the object",
                      f"give it a plain name — {NO_SETTING}")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            path = self.aliases.resolve(base)
            if path in TENSOR_BASES:
                self._add(Reason.TENSOR_SUBCLASS, node, f"class {node.name}({path})")
            elif isinstance(base, ast.Name) and base.id in self.aliases.classes:
                continue  # a class the candidate defined itself
            elif path not in ALLOWED_BASES:
                self._add(Reason.DYNAMIC_CODE, node, f"class {node.name}({ast.unparse(base)})",
                          "a class may derive only from nn.Module, autograd.Function, object or your own classes, "
                          "since other bases bring behaviour the gate has not read",
                          f"derive from nn.Module — {NO_SETTING}")
        for kw in node.keywords:
            self._add(Reason.DYNAMIC_CODE, node, f"{kw.arg}=",
                      "a class keyword (a metaclass) changes how the class is built", f"remove the keyword — {NO_SETTING}")
        self.generic_visit(node)

    # names and attributes ----------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS and node.id not in self.aliases.names and node.id not in self.local_names:
            self._add(BANNED_BUILTINS[node.id], node, node.id, *_builtin_text(node.id))
        elif isinstance(node.ctx, ast.Store) and _is_dunder(node.id) and node.id not in ALLOWED_DUNDERS:
            reason = Reason.TENSOR_SUBCLASS if "torch" in node.id else Reason.DYNAMIC_CODE
            self._add(reason, node, f"{node.id} = ...", "assigning a dunder name installs a hook Python or torch calls",
                      f"give it a plain name — {NO_SETTING}")
        elif isinstance(node.ctx, ast.Load) and node.id in self.aliases.names:
            self._check_path(node, self.aliases.names[node.id])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _is_dunder(node.attr) and node.attr not in ALLOWED_DUNDERS:
            self._add(Reason.DYNAMIC_CODE, node, ast.unparse(node),
                      "dunder attributes reach the interpreter's internals",
                      f"use the public attribute or function — {NO_SETTING}")
        if node.attr in BANNED_ATTRIBUTES:
            self._add(BANNED_ATTRIBUTES[node.attr], node, ast.unparse(node))
        path = self.aliases.resolve(node)
        if path is not None:
            self._check_path(node, path)
            return  # the chain below is the same path, already judged
        self.generic_visit(node)

    def _check_path(self, node: ast.AST, path: str) -> None:
        """Judge one resolved dotted path (torch.*, math.*, ...)."""
        if not path.startswith("torch"):
            return
        behind = next((p for p in path.split(".")[1:] if p in MODULES_BEHIND_TORCH), None)
        if behind is not None:
            self._add(MODULES_BEHIND_TORCH[behind], node, path,
                      f"this is the {behind} module reached through torch, which the import allowlist keeps out",
                      f"remove it — {NO_SETTING}")
            return
        for rule, reason in TORCH_PATH_RULES:
            if _matches(path, rule):
                if reason is not None:
                    self._add(reason, node, path, *_torch_api_text(reason))
                elif not self.allow:
                    self._add(Reason.NO_CUSTOM_KERNEL, node, path,
                              "torch's compiler or tracer writes the kernels instead of you", TORCH_FIX)
                return
        if path in TORCH_PRIVATE_HELPERS:
            return      # shape arithmetic: neither private machinery nor compute
        if any(p.startswith("_") and not _is_dunder(p) for p in path.split(".")):
            self._add(Reason.DYNAMIC_CODE, node, path,
                      "private torch APIs (a leading underscore) reach internals the gate does not vet",
                      f"use the public API — {NO_SETTING}")
        elif not self.allow and not self.in_init and not self._non_compute(path):
            self._torch_work(node, path, "torch compute")

    @staticmethod
    def _non_compute(path: str) -> bool:
        if path in ("torch", "torch.nn", "torch.cuda", "torch.utils", "torch.utils.cpp_extension",
                    "torch.nn.functional", "torch.autograd"):
            return True  # a bare module reference (its members are judged where used)
        return any(_matches(path, ok) for ok in TORCH_NON_COMPUTE)

    # calls, assignments, operators -------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "delattr", "hasattr"):
            self._check_reflection(node, func.id)
        if _is_name(func, "type") and len(node.args) == 3:
            self._add(Reason.DYNAMIC_CODE, node, "type(name, bases, dict)",
                      "creating a class at run time hides it from the gate",
                      f"write a class statement — {NO_SETTING}")
        if isinstance(func, ast.Attribute) and not self.allow and not self.in_init:
            self._check_method(node, func)
        if self.aliases.resolve(func) == "torch.compile":
            for kw in node.keywords:
                if kw.arg == "mode" and isinstance(kw.value, ast.Constant) and kw.value.value != "default":
                    self._add(Reason.CUDA_GRAPH, node, f"torch.compile(mode={kw.value.value!r})",
                              "torch.compile modes other than default capture CUDA graphs, which replay work the "
                              "timer never sees launched",
                              "drop the mode (torch.compile itself needs eval.allow_torch_rewrites=true) — no "
                              "setting accepts other modes")
        self.generic_visit(node)

    def _check_method(self, node: ast.Call, func: ast.Attribute) -> None:
        receiver = func.value
        if self.aliases.is_ext(receiver) or self.aliases.resolve(receiver) is not None:
            return  # the extension's own functions; module functions are judged by path
        name = _target_name(func)
        if name is not None and name in self.torch_layers:
            self._torch_work(node, f"{name}(...)", "a torch layer or function held by the module")
        elif not _is_name(receiver, "self") and func.attr in TENSOR_COMPUTE_METHODS:
            self._torch_work(node, f".{func.attr}()", "the tensor compute method")

    def _check_reflection(self, node: ast.Call, fn: str) -> None:
        if len(node.args) < 2:
            return
        name = node.args[1]
        path = self.aliases.resolve(node) if fn == "getattr" else None
        if path is not None:
            self._check_path(node, path)
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            self._add(Reason.DYNAMIC_CODE, node, f"{fn}(..., <non-literal>)",
                      "reflection with a computed name reaches attributes the gate cannot see",
                      f"use a literal attribute name — {NO_SETTING}")
        elif _is_dunder(name.value):
            self._add(Reason.DYNAMIC_CODE, node, f"{fn}(..., {name.value!r})",
                      "dunder attributes reach the interpreter's internals",
                      f"use the public attribute or function — {NO_SETTING}")
        elif fn in ("setattr", "delattr") and self._foreign_root(node.args[0]):
            self._add(Reason.MONKEYPATCH, node, f"{fn}({ast.unparse(node.args[0])}, {name.value!r})")

    def _foreign_root(self, node: ast.AST) -> bool:
        """The Name at the root of an attribute/subscript chain is an import or a builtin."""
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return isinstance(node, ast.Name) and (
            node.id in self.aliases.names or node.id in _BUILTIN_NAMES
        )

    def _check_targets(self, targets: list[ast.expr], value: ast.AST | None) -> None:
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                self._check_targets(list(target.elts), None)
            elif isinstance(target, (ast.Attribute, ast.Subscript)) and self._foreign_root(target):
                self._add(Reason.MONKEYPATCH, target, f"{ast.unparse(target)} = ...")
            name = _target_name(target)
            if value is not None and name is not None and name.startswith("self."):
                self._track_layer(name, value)

    def _track_layer(self, name: str, value: ast.AST) -> None:
        """`self.X = nn.Linear(...)` or `self.X = torch.relu`: calling self.X later is torch compute."""
        callee = value.func if isinstance(value, ast.Call) else value
        path = self.aliases.resolve(callee)
        if path is None or self._non_compute(path):
            return
        if isinstance(value, ast.Call) and not path.startswith("torch.nn."):
            return  # the result of a torch call (a tensor), not a callable
        self.torch_layers.add(name)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check_targets(list(node.targets), node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_targets([node.target], None)
        if isinstance(node.op, ast.MatMult) and not self.allow and not self.in_init:
            self._torch_work(node, "@=", "the matmul operator")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_targets([node.target], node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._check_targets(list(node.targets), None)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self.allow and not self.in_init:
            self._torch_work(node, ast.unparse(node), "the matmul operator")
        self.generic_visit(node)


def _own_nodes(scope: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[ast.AST]:
    """The nodes of a scope's body, not those of the functions, lambdas and classes inside it (nor a
    function's decorators and defaults, which its enclosing scope evaluates)."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(scope.body) if isinstance(scope.body, list) else [scope.body]
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo += ast.iter_child_nodes(node)
    return found


def _bound_names(node: ast.AST) -> list[str]:
    """The names a statement or expression binds in its scope."""
    if isinstance(node, ast.Assign):
        targets: list[ast.AST] = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    else:
        return []
    return [name for t in targets for name in _target_names(t)]


def _target_names(target: ast.AST) -> list[str]:
    """The names an assignment target binds: `x`, those in `(x, *y)`; not the object of `x.attr` or
    `x[i]` (storing into an object does not bind its name)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for elt in target.elts for name in _target_names(elt)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _function_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names local to a function: its parameters and what its own body binds, less the names
    it declares global or nonlocal.  A parameter named `input` is not the builtin."""
    args = fn.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a is not None}
    own = _own_nodes(fn)
    names |= {name for node in own for name in _bound_names(node)}
    declared = {name for node in own if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}
    return names - declared


def _attribute_stores(tree: ast.Module) -> dict[str, int]:
    """How often the module stores (or deletes) each attribute name, on any object: `x.NAME = ...`,
    `setattr(x, "NAME", ...)`, and `NAME = ...` in a class body (a class attribute an instance
    reads through `self.NAME`)."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names = [node.attr]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            names = [node.args[1].value]
        elif isinstance(node, ast.ClassDef):
            names = [name for n in _own_nodes(node) for name in _bound_names(n)]
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


def _instance_constants(cls: ast.ClassDef, visible: dict[str, object], stores: dict[str, int]) -> dict[str, str]:
    """The literal strings a method of `cls` stores on its instance (`self.NAME = "..."`) where that
    is the module's only store of NAME: every method reads the same text through `self.NAME`
    (CUDA-L1's released kernels keep their CUDA source in an attribute set in the constructor)."""
    found: dict[str, str] = {}
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        me = method.args.args[0].arg
        own = _own_nodes(method)
        if any(me in _bound_names(node) for node in own):
            continue   # `self` rebound in the method: its attributes are another object's
        for node in own:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me
                    and stores.get(target.attr) == 1):
                text = _literal_string(node.value, visible)
                if text is not None:
                    found[target.attr] = text
    return found


def _scoped_constants(tree: ast.Module, module: dict[str, object]) -> dict[int, dict[str, object]]:
    """For each call (by id), the constants its arguments may name: those of the scopes it can see
    (the module's, an enclosing function's), the strings of literals its own
    function assigns to a local name exactly once (released KernelBench solutions often define their
    CUDA source in the constructor that builds it), and in a method, as `SELF.NAME` (SELF its first
    parameter), the literals its class stores on the instance once (`_instance_constants`).  A name
    the function binds any other way (a parameter, a loop, a second assignment) is not a constant
    there, whatever the module's is."""
    scopes: dict[int, dict[str, object]] = {}
    stores = _attribute_stores(tree)

    def enter(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, visible: dict[str, object],
              instance: dict[str, str] | None = None) -> None:
        own = _own_nodes(fn)
        local_names = _function_locals(fn)
        counts: dict[str, int] = {}
        for node in own:
            for name in _bound_names(node):
                counts[name] = counts.get(name, 0) + 1
        local = {k: v for k, v in visible.items() if k.split(".")[0] not in local_names}
        if instance and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.args.args:
            me = fn.args.args[0].arg
            if me not in counts:
                local.update({f"{me}.{name}": text for name, text in instance.items()})
        for node in sorted((n for n in own if isinstance(n, ast.Assign)), key=lambda n: (n.lineno, n.col_offset)):
            target = node.targets[0] if len(node.targets) == 1 else None
            if isinstance(target, ast.Name) and target.id in local_names and counts[target.id] == 1:
                text = _literal_string(node.value, local)
                if text is not None:
                    local[target.id] = text
        nested(own, local)

    def nested(nodes: list[ast.AST], visible: dict[str, object], instance: dict[str, str] | None = None) -> None:
        """Calls among `nodes` see `visible`; the functions among them are entered (a class's
        methods with its `instance` constants); a class body's calls see `visible` less the names
        the body binds, and its methods see `visible` (a class body is not a scope its methods can
        read)."""
        for node in nodes:
            if isinstance(node, ast.Call):
                scopes[id(node)] = visible
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                enter(node, visible, instance)
            elif isinstance(node, ast.ClassDef):
                body = _own_nodes(node)
                bound = {name for n in body for name in _bound_names(n)}
                in_body = {k: v for k, v in visible.items() if k not in bound}
                for n in body:
                    if isinstance(n, ast.Call):
                        scopes[id(n)] = in_body
                nested([n for n in body if not isinstance(n, ast.Call)], visible,
                       _instance_constants(node, visible, stores))

    nested(_own_nodes(tree), module)
    return scopes


def _native_sources(tree: ast.Module, aliases: _Aliases) -> tuple[list[_Native], list[Finding]]:
    """Source strings of every load_inline call, plus findings for non-literal sources/flags."""
    natives: list[_Native] = []
    findings: list[Finding] = []
    scopes = _scoped_constants(tree, aliases.constants)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and aliases.resolve(node.func) == _LOAD_INLINE):
            continue
        constants = scopes.get(id(node), aliases.constants)
        args: dict[str, ast.expr] = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        for slot, name in enumerate(_NATIVE_KWARGS, start=1):
            if len(node.args) > slot:
                args[name] = node.args[slot]
        for name in _NATIVE_KWARGS:
            if name not in args or (isinstance(args[name], ast.Constant) and args[name].value is None):
                continue
            texts = _literal_strings(args[name], constants)
            if texts is None:
                findings.append(Finding(Reason.DYNAMIC_CODE, f"{name}={ast.unparse(args[name])}"[:80], node.lineno,
                                        "python", "the gate scans only load_inline sources it can read in the file",
                                        "pass string literals, or a name the module or the calling function "
                                        "assigns a literal once, or an attribute its class sets to a literal once "
                                        f"— {NO_SETTING}"))
                continue
            line = getattr(args[name], "lineno", node.lineno)
            natives += [_Native(name, i, t, line) for i, t in enumerate(texts)]
        findings += _check_flags(node, args, constants)
        if "build_directory" in args:
            findings.append(Finding(Reason.FILE_ACCESS, "build_directory=", node.lineno, "python",
                                    "the evaluator chooses where extensions are built",
                                    f"remove build_directory — {NO_SETTING}"))
    return natives, findings


_FLAG_KWARGS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")


def _check_flags(node: ast.Call, args: dict[str, ast.expr], constants: dict[str, object]) -> list[Finding]:
    """Flags must be literals on the allow list (`flags.py`); linking a BLAS/DNN library is a library kernel."""
    values: dict[str, list[str]] = {}
    for kw in _FLAG_KWARGS:
        if kw not in args or (isinstance(args[kw], ast.Constant) and args[kw].value is None):
            values[kw] = []
            continue
        flags = _literal_strings(args[kw], constants)
        if flags is None:
            return [Finding(Reason.DYNAMIC_CODE, f"{kw}=", node.lineno, "python",
                            "the gate checks only flags it can read in the file",
                            f"pass a literal list of flags — {NO_SETTING}")]
        values[kw] = flags
    blas = [f for f in values["extra_ldflags"] if any(lib in f.lower() for lib in _BLAS_LIBS)]
    if blas:
        return [Finding(Reason.NO_CUSTOM_KERNEL, blas[0], node.lineno, "python",
                        "a linked BLAS/DNN library would do the work instead of your kernel",
                        "drop the library from extra_ldflags — no setting accepts linking it (with "
                        "eval.allow_torch_rewrites=true, call torch's own ops instead)")]
    refused = check_flags(*(values[kw] for kw in _FLAG_KWARGS))
    if refused is not None:
        return [Finding(Reason.FORBIDDEN_FLAG, refused, node.lineno, "python")]
    return []


def _literal_strings(node: ast.AST, constants: dict[str, object]) -> list[str] | None:
    """A string / list of strings built from literals and module-level constants, else None."""
    if isinstance(node, (ast.List, ast.Tuple)):
        parts = [_literal_string(e, constants) for e in node.elts]
        return None if any(p is None for p in parts) else [p for p in parts if p is not None]
    one = _literal_string(node, constants)
    return None if one is None else [one]


def _literal_string(node: ast.AST, constants: dict[str, object]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(constants.get(node.id), str):
        return constants[node.id]  # type: ignore[return-value]
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and isinstance(constants.get(f"{node.value.id}.{node.attr}"), str)):
        return constants[f"{node.value.id}.{node.attr}"]  # type: ignore[return-value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_string(node.left, constants), _literal_string(node.right, constants)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif (isinstance(value, ast.FormattedValue) and value.format_spec is None
                  and isinstance(value.value, ast.Name)
                  and isinstance(constants.get(value.value.id), (str, int, float))):
                parts.append(str(constants[value.value.id]))
            else:
                return None
        return "".join(parts)
    return None
