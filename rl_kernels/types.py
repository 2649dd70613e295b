"""The small, serialisable records that flow through the system (tasks, candidates, builds, measurements).

They are plain dataclasses so they pickle through Ray's object store and round-trip through JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

TaskKind = Literal["hgemm", "module"]


@dataclass(frozen=True)
class HgemmSpec:
    """C[MxN] = A[MxK] . B[KxN] in fp16, accumulated in `accumulator` precision."""

    m: int
    n: int
    k: int
    accumulator: Literal["fp16", "fp32"]

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def min_bytes(self) -> float:
        return 2.0 * (self.m * self.k + self.k * self.n + self.m * self.n)


@dataclass(frozen=True)
class Task:
    """One optimisation problem.  `source` is the KernelBench-format file for module tasks."""

    id: str
    kind: TaskKind
    source: str = ""
    hgemm: HgemmSpec | None = None
    seeds: dict[str, str] = field(default_factory=dict)
    allow_torch_ops: bool = False
    description: str = ""


@dataclass(frozen=True)
class Candidate:
    task_id: str
    source: str
    backend: Literal["cpu", "cuda"]


@dataclass
class Build:
    """Outcome of compiling a candidate; `artifact` is a self-contained file's bytes (shippable)."""

    key: str
    ok: bool
    artifact: bytes | None = None
    artifact_name: str = ""
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    reason: str | None = None
    path: str = ""   # headers it was built against: "shim" (hgemm's fast path), "slim" (a module's CUDA file, evaluation/slim_torch.py) or "torch" (torch's own)
    kernels: list[str] = field(default_factory=list)   # mangled names of the cuda kernels it registers


@dataclass
class Measurement:
    """What the evaluator says about one candidate: gates passed, times, speedup, reward."""

    task: str
    backend: str
    mode: str
    compiled: bool = False
    correct: bool = False
    rejected: str | None = None
    detail: str = ""
    candidate_ms: float | None = None
    baseline_ms: float | None = None
    baseline: str | None = None
    baselines_ms: dict[str, float] = field(default_factory=dict)
    speedup: float | None = None
    noise: float | None = None
    reward: float = 0.0
    flagged: str | None = None
    max_abs_err: float | None = None
    rel_norm_err: float | None = None
    candidate_spread: float | None = None
    baseline_spread: float | None = None
    samples: int = 0
    sm_clock_mhz: float | None = None
    device: str = ""
    shared_device: bool = False
    build_seconds: float = 0.0
    build_cached: bool = False
    eval_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
