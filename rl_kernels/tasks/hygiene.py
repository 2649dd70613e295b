"""Task hygiene: find degenerate tasks before they teach the policy to cheat.

A task whose reference output is (near) zero, the same for every input, or independent of one of
its inputs rewards kernels that skip the work (return zeros, a cached constant, ignore an input),
and the correctness gate cannot tell them apart from real kernels.  KernelBench has such tasks, so
every module task is run here on several fresh input sets before training, and flagged tasks are
excluded by default (`eval.exclude_degenerate`).

Thresholds (keyword arguments of `check_task_hygiene`):
  near_zero_rel      flag `near_zero_output` when max |y| over all input sets is at most this
                     fraction of the mean |x| of the floating inputs (1.0 when there are none).
  constant_rel       an output element is "constant" when its range across input sets is at most
                     this fraction of (|its mean| + mean |y|): exact constants and fp32 noise
                     around a constant both count.
  constant_fraction  flag `constant_output` when at least this fraction of elements is constant.
  insensitive_rel    flag `ignores_input_<i>` when redrawing floating input i alone changes the
                     output by at most this fraction of max |y|, on each of two input sets.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import torch

from rl_kernels.evaluation.inputs import DISTRIBUTIONS, resample_inputs, to_device
from rl_kernels.tasks.module import TaskError, load_task_program
from rl_kernels.types import Task

log = logging.getLogger(__name__)

# Bump when the checks change, so cached reports computed by older logic are recomputed.
HYGIENE_VERSION = 1
SENSITIVITY_SETS = 2


@dataclass
class HygieneReport:
    task_id: str
    degenerate: bool
    reasons: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def _flat_output(out: Any, task_id: str) -> torch.Tensor:
    """The reference output(s) as one flat fp64 CPU tensor, so all checks see a single vector."""
    tensors = list(out) if isinstance(out, (tuple, list)) else [out]
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TaskError(f"task {task_id}: Model.forward must return a tensor or a tuple of tensors")
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in tensors])


def _input_scale(inputs: list[Any]) -> float:
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]
    if not floats:
        return 1.0
    return float(sum(x.detach().abs().double().mean().item() for x in floats) / len(floats))


def _redraw_one(inputs: list[Any], index: int, dist: str, seed: int) -> list[Any]:
    """`inputs` with input `index` alone replaced by fresh values of the same distribution."""
    fresh = resample_inputs([inputs[index]], dist, seed)[0]
    return [fresh if i == index else x for i, x in enumerate(inputs)]


def _run_checks(task: Task, device: str, seed: int, num_sets: int, near_zero_rel: float,
                constant_rel: float, constant_fraction: float, insensitive_rel: float) -> HygieneReport:
    program = load_task_program(task)
    torch.manual_seed(seed)
    model = program.model_cls(*program.get_init_inputs()).to(device).eval()
    base = program.get_inputs()
    dists = [DISTRIBUTIONS[k % len(DISTRIBUTIONS)] for k in range(num_sets)]
    input_sets = [to_device(resample_inputs(base, d, seed * 1000 + k), device) for k, d in enumerate(dists)]
    with torch.no_grad():
        outputs = [_flat_output(model(*inputs), task.id) for inputs in input_sets]

    reasons: list[str] = []
    scale = _input_scale(input_sets[0])
    max_abs = [float(y.nan_to_num(0.0, 0.0, 0.0).abs().max()) if y.numel() else 0.0 for y in outputs]
    nonfinite = {d: int((~torch.isfinite(y)).sum()) for d, y in zip(dists, outputs)}
    stats: dict[str, Any] = {"input_scale": scale, "max_abs_output": dict(zip(dists, max_abs)),
                             "nonfinite": nonfinite, "output_numel": int(outputs[0].numel())}
    if nonfinite[dists[0]]:
        reasons.append(f"non_finite_output: {nonfinite[dists[0]]} non-finite values on {dists[0]} inputs")

    if max(max_abs) <= near_zero_rel * scale:
        reasons.append(f"near_zero_output: max |y| = {max(max_abs):.3g} with mean |x| = {scale:.3g}")
        return HygieneReport(task.id, True, reasons, stats)

    ys = torch.stack(outputs).nan_to_num(0.0, 0.0, 0.0)
    spread = ys.max(dim=0).values - ys.min(dim=0).values
    level = ys.mean(dim=0).abs() + ys.abs().mean()
    frac_constant = float((spread <= constant_rel * level).double().mean()) if ys.shape[1] else 1.0
    stats["constant_fraction"] = frac_constant
    if frac_constant >= constant_fraction:
        reasons.append(f"constant_output: {frac_constant:.0%} of output elements are the same "
                       f"across {num_sets} input sets")
        return HygieneReport(task.id, True, reasons, stats)

    sensitivity: dict[str, float] = {}
    for index, x in enumerate(base):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            continue
        changes = []
        for k in range(min(SENSITIVITY_SETS, num_sets)):
            perturbed = _redraw_one(input_sets[k], index, dists[k], seed * 1000 + 500 + k)
            with torch.no_grad():
                y = _flat_output(model(*perturbed), task.id)
            changes.append(float((y - outputs[k]).nan_to_num(0.0, 0.0, 0.0).abs().max()) / max(max_abs[k], 1e-30))
        sensitivity[str(index)] = max(changes)
        if max(changes) <= insensitive_rel:
            reasons.append(f"ignores_input_{index}: output unchanged when input {index} is redrawn")
    stats["input_sensitivity"] = sensitivity
    return HygieneReport(task.id, bool(reasons), reasons, stats)


def check_task_hygiene(task: Task, device: str = "cpu", seed: int = 0, *, num_sets: int = 4,
                       near_zero_rel: float = 1e-5, constant_rel: float = 1e-5,
                       constant_fraction: float = 0.9, insensitive_rel: float = 1e-6,
                       cache_dir: Path | None = None) -> HygieneReport:
    """Run the task's reference on fresh inputs and flag it if degenerate (see module docstring).

    With `cache_dir`, reports are kept as `<cache_dir>/<sha256(task.source)>.json` and reused while
    the device, seed, thresholds and `HYGIENE_VERSION` are unchanged.
    """
    if task.kind != "module":
        return HygieneReport(task.id, False, [], {"kind": task.kind})
    if num_sets < SENSITIVITY_SETS:
        raise ValueError(f"num_sets must be at least {SENSITIVITY_SETS}, got {num_sets}")
    params = {"version": HYGIENE_VERSION, "device": device, "seed": seed, "num_sets": num_sets,
              "near_zero_rel": near_zero_rel, "constant_rel": constant_rel,
              "constant_fraction": constant_fraction, "insensitive_rel": insensitive_rel}
    cache_file = None
    if cache_dir is not None:
        cache_file = Path(cache_dir) / f"{hashlib.sha256(task.source.encode()).hexdigest()}.json"
        if cache_file.is_file():
            entry = json.loads(cache_file.read_text())
            if entry.get("params") == params:
                return HygieneReport(**{**entry["report"], "task_id": task.id})
    report = _run_checks(task, device, seed, num_sets, near_zero_rel, constant_rel,
                         constant_fraction, insensitive_rel)
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"params": params, "report": dataclasses.asdict(report)}, indent=1))
        tmp.replace(cache_file)  # atomic: concurrent checkers never read a half-written report
    return report


def filter_tasks(tasks: Iterable[Task], reports: Iterable[HygieneReport],
                 include_degenerate: bool = False) -> list[Task]:
    """Tasks fit for training: degenerate ones are dropped (and logged) unless asked to keep them."""
    by_id = {r.task_id: r for r in reports}
    tasks = list(tasks)
    missing = [t.id for t in tasks if t.id not in by_id]
    if missing:
        raise TaskError(f"no hygiene report for task(s): {', '.join(missing)}")
    kept = []
    for task in tasks:
        report = by_id[task.id]
        if report.degenerate and not include_degenerate:
            log.warning("excluding degenerate task %s: %s", task.id, "; ".join(report.reasons))
        else:
            kept.append(task)
    return kept
