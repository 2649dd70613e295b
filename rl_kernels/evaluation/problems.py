"""The two task kinds as the evaluation subprocess sees them: inputs, reference, candidate, baselines.

Both expose one interface so the worker's protocol (correctness, timing, guards) is written once:
`make_set` draws a fresh input set, `call_candidate` / `call_baseline` run on it and return the
outputs, `reference` computes the high-precision answer, `prepare` poisons outputs before a call
and `guards_intact` reports out-of-bounds writes.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rl_kernels.config import CorrectnessConfig, EvalConfig
from rl_kernels.evaluation.correctness import Tolerance, as_output_list, dtype_tolerance
from rl_kernels.evaluation.inputs import refill_, resample_inputs, to_device, to_reference_precision
from rl_kernels.types import HgemmSpec, Task

GUARD_ELEMS = 4096   # the least guard on each side of a buffer, in elements
GUARD_TILE = 256     # the largest tile (rows, and columns of the last row) a kernel may round a dimension up to
_GUARD_BITS = 0x5A5A  # fp16 bit pattern 0x5A5A = 203.25: any write changes it


@dataclass
class InputSet:
    args: list[Any]
    outputs: list[torch.Tensor] = field(default_factory=list)   # preallocated (hgemm) outputs
    guards: list[torch.Tensor] = field(default_factory=list)    # regions that must stay untouched
    reference: list[torch.Tensor] | None = None


def guard_elems(shape: tuple[int, ...]) -> int:
    """Elements of guard on each side of a row-major buffer of `shape`: a whole tile of rows and one
    of columns (`GUARD_TILE`), at least `GUARD_ELEMS`.  A tiled kernel that skips its bounds checks
    rounds M, N or K up to its tile and so writes up to a tile of rows past C's end and reads as far
    past A's or B's; all of it lands in guard, where a write is seen and a read gets NaN."""
    row = shape[-1] if len(shape) > 1 else 1
    return max(GUARD_ELEMS, GUARD_TILE * row + GUARD_TILE)


def _guarded(numel: int, shape: tuple[int, ...], dtype: torch.dtype, device: str, fill: float | None):
    """A tensor inside a larger buffer with guard regions of `guard_elems(shape)` on both sides.

    Guards around inputs hold NaN, so a kernel that reads out of bounds produces NaN; guards around
    outputs hold a bit pattern, so a kernel that writes out of bounds is seen afterwards.  Nothing
    rewrites a guard, so a mark left by any call stays until the judge reads the guards.
    """
    pad = guard_elems(shape)
    buf = torch.empty(numel + 2 * pad, dtype=dtype, device=device)
    if fill is None:
        buf.view(torch.int16).fill_(_GUARD_BITS)
    else:
        buf.fill_(fill)
    body = buf[pad:pad + numel].view(shape)
    return body, [buf[:pad], buf[pad + numel:]]


def hgemm_relnorm(c: CorrectnessConfig, accumulator: str, k: int) -> float:
    """The relative-norm bound of an hgemm result against the fp32 product: output rounding for an
    fp32-accumulate kernel, plus per-add rounding that grows like sqrt(K) for an fp16 one."""
    if accumulator == "fp32":
        return c.hgemm_fp32_acc_relnorm
    return max(c.hgemm_fp32_acc_relnorm, c.hgemm_fp16_acc_relnorm_per_sqrt_k * math.sqrt(k))


class HgemmProblem:
    """C[MxN] = A[MxK] . B[KxN] in fp16 with the CUDA-L2 argument layout."""

    kind = "hgemm"

    def __init__(self, spec: HgemmSpec, device: str, cfg: EvalConfig):
        self.spec = spec
        self.device = device
        self.cfg = cfg
        self.candidate: Callable[..., None] | None = None
        self.baselines: dict[str, Callable[[InputSet], list[torch.Tensor]]] = {
            "torch_matmul": self._torch_matmul,
        }
        # Inputs scaled by K^-1/4 each keep |C| ~ 1 for every K, far from fp16 overflow.
        self.scale = spec.k ** -0.25

    @property
    def set_bytes(self) -> int:
        return int(self.spec.min_bytes + 2 * self.spec.k * self.spec.n)

    def tolerance(self) -> Tolerance:
        c = self.cfg.correctness
        rel = hgemm_relnorm(c, self.spec.accumulator, self.spec.k)
        return Tolerance(atol=0.0, rtol=c.rtol["float16"], relnorm=rel, atol_rms_multiple=8 * rel)

    def add_cublas(self, lib: Any) -> None:
        acc = self.spec.accumulator
        for name, fn in (("cublas", lib.gemmex), ("cublaslt_heuristic", lib.lt_heuristic),
                         ("cublaslt_autotuned", lib.lt_autotuned)):
            self.baselines[name] = lambda s, fn=fn: (fn(s.args[0], s.args[1], s.outputs[0], acc), s.outputs)[1]

    def _torch_matmul(self, s: InputSet) -> list[torch.Tensor]:
        torch.matmul(s.args[0], s.args[1], out=s.outputs[0])
        return s.outputs

    def make_set(self, dist: str, seed: int) -> InputSet:
        """Inputs inside NaN guards, drawn on the device (host-side sampling of 8192^2 fp64 is slow)."""
        m, n, k = self.spec.m, self.spec.n, self.spec.k
        a, a_guards = _guarded(m * k, (m, k), torch.float16, self.device, float("nan"))
        b, b_guards = _guarded(k * n, (k, n), torch.float16, self.device, float("nan"))
        bt, bt_guards = _guarded(n * k, (n, k), torch.float16, self.device, float("nan"))
        b_col_major = bt.view(k, n)   # CUDA-L2's as_col_major: B^T's storage with B's shape
        c, c_guards = _guarded(m * n, (m, n), torch.float16, self.device, None)
        s = InputSet([a, b, b_col_major], [c], a_guards + b_guards + bt_guards + c_guards)
        self.refresh(s, dist, torch.Generator(device=self.device).manual_seed(seed))
        return s

    def refresh(self, s: InputSet, dist: str, gen: torch.Generator) -> None:
        """New values in the same buffers (B's column-major copy follows B)."""
        a, b, b_col_major = s.args
        refill_(a, dist, gen, self.scale)
        refill_(b, dist, gen, self.scale)
        b_col_major.view(self.spec.n, self.spec.k).copy_(b.t())
        s.reference = None

    def load_candidate(self, entry: Callable[..., None]) -> None:
        self.candidate = entry

    def call_candidate(self, s: InputSet) -> list[torch.Tensor]:
        assert self.candidate is not None
        self.candidate(s.args[0], s.args[1], s.args[2], s.outputs[0])
        return s.outputs

    def call_baseline(self, name: str, s: InputSet) -> list[torch.Tensor]:
        return self.baselines[name](s)

    def prepare(self, s: InputSet) -> None:
        s.outputs[0].fill_(float("nan"))

    def reference(self, s: InputSet) -> list[torch.Tensor]:
        if s.reference is None:
            a, b = s.args[0], s.args[1]
            s.reference = [torch.matmul(a.double(), b.double()).float()]
        return s.reference

    def expected(self, s: InputSet) -> list[torch.Tensor]:
        return s.outputs

    def guards_intact(self, s: InputSet) -> bool:
        outs = s.guards[-2:]
        ins = s.guards[:-2]
        return all(bool((g.view(torch.int16) == _GUARD_BITS).all()) for g in outs) and all(
            bool(torch.isnan(g).all()) for g in ins
        )

    def variant_sets(self, seed: int) -> list[InputSet]:
        return []

    def flops(self) -> float:
        return self.spec.flops


class ModuleProblem:
    """A KernelBench task: `Model` is the reference, the candidate's `ModelNew` is timed against it."""

    kind = "module"

    def __init__(self, task: Task, device: str, cfg: EvalConfig, seed: int, with_compile: bool):
        from rl_kernels.tasks.module import load_task_program

        self.task = task
        self.device = device
        self.cfg = cfg
        self.seed = seed
        self.program = load_task_program(task)
        torch.manual_seed(seed)
        self.init_inputs = self.program.get_init_inputs()
        torch.manual_seed(seed)
        self.ref_model = self.program.model_cls(*self.init_inputs).to(device).eval()
        self.ref64 = copy.deepcopy(self.ref_model).double()
        torch.manual_seed(seed)
        self.template = to_device(list(self.program.get_inputs()), device)
        self.candidate: torch.nn.Module | None = None
        self._tolerance: Tolerance | None = None
        self.baselines: dict[str, Callable[[InputSet], list[Any]]] = {"eager": self._eager}
        if with_compile:
            compiled = torch.compile(self.ref_model)
            self.baselines["compile"] = lambda s: as_output_list(compiled(*s.args))

    @property
    def set_bytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in self.template if isinstance(x, torch.Tensor))

    def tolerance(self) -> Tolerance:
        """Tolerances for the task's output dtype (found with one eager call, then kept)."""
        if self._tolerance is None:
            out_dtype = str(self._eager(InputSet(self.template))[0].dtype).replace("torch.", "")
            self._tolerance = dtype_tolerance(self.cfg.correctness, out_dtype)
        return self._tolerance

    def _eager(self, s: InputSet) -> list[Any]:
        with torch.no_grad():
            return as_output_list(self.ref_model(*s.args))

    def make_set(self, dist: str, seed: int) -> InputSet:
        return InputSet(resample_inputs(self.template, dist, seed))

    def refresh(self, s: InputSet, dist: str, gen: torch.Generator) -> None:
        for x in s.args:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                refill_(x, dist, gen)
        s.reference = None

    def load_candidate(self, source: str, load_inline: Callable[..., Any]) -> None:
        self.candidate = instantiate_model_new(source, load_inline, self.init_inputs, self.seed, self.device)

    def call_candidate(self, s: InputSet) -> list[Any]:
        assert self.candidate is not None
        with torch.no_grad():
            return as_output_list(self.candidate(*s.args))

    def call_baseline(self, name: str, s: InputSet) -> list[Any]:
        return self.baselines[name](s)

    def prepare(self, s: InputSet) -> None:
        poison_allocator(self.device, self.set_bytes)

    def reference(self, s: InputSet) -> list[torch.Tensor]:
        if s.reference is None:
            with torch.no_grad():
                s.reference = as_output_list(self.ref64(*to_reference_precision(s.args)))
        return s.reference

    def expected(self, s: InputSet) -> list[torch.Tensor]:
        return self._eager(s)

    def guards_intact(self, s: InputSet) -> bool:
        return True

    def variant_sets(self, seed: int) -> list[InputSet]:
        """Other shapes from the task's optional get_variant_inputs(): catches shape hard-coding."""
        getter = self.program.get_variant_inputs
        if getter is None:
            return []
        torch.manual_seed(seed)
        return [InputSet(to_device(list(v), self.device)) for v in getter()]

    def flops(self) -> float:
        return 0.0


def poison_allocator(device: str, nbytes: int) -> None:
    """Fill recycled allocator memory with NaN (cuda; at least 4 MiB) so that an output a candidate
    allocates and never writes reads as NaN."""
    if device.startswith("cuda"):
        torch.empty(max(nbytes // 4, 1 << 20), device=device).fill_(float("nan"))


def instantiate_model_new(source: str, load_inline: Callable[..., Any], init_inputs: list[Any], seed: int,
                          device: str) -> torch.nn.Module:
    """Runs the candidate's module source and builds its ModelNew with the reference's init inputs,
    seeded as the reference was (so parameters drawn at init match the reference's)."""
    import torch.utils.cpp_extension as cpp_extension

    cpp_extension.load_inline = load_inline
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(source, "candidate.py", "exec"), namespace)
    model_new = namespace.get("ModelNew")
    if model_new is None:
        raise LookupError("the candidate defines no ModelNew")
    torch.manual_seed(seed)
    return model_new(*init_inputs).to(device).eval()


def task_init_inputs(task: Task, seed: int) -> list[Any]:
    """The task's init inputs as ModuleProblem draws them (same seed, same order of draws)."""
    from rl_kernels.tasks.module import load_task_program

    torch.manual_seed(seed)
    return list(load_task_program(task).get_init_inputs())
