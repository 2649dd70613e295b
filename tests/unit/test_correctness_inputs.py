from __future__ import annotations

import math

import pytest
import torch

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.correctness import Tolerance, check_structure, compare_values, snapshot, unchanged
from rl_kernels.evaluation.inputs import DISTRIBUTIONS, refill_, resample_inputs, sample_like
from rl_kernels.evaluation.problems import HgemmProblem
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.types import HgemmSpec

TOL = Tolerance(atol=1e-4, rtol=1e-4, relnorm=1e-5)


class Lazy(torch.Tensor):
    pass


def test_structure_checks_are_exact() -> None:
    ref = [torch.zeros(4, 3)]
    assert check_structure([torch.zeros(4, 3)], ref).ok
    assert check_structure([torch.zeros(4, 3).as_subclass(Lazy)], ref).reason == Reason.WRONG_OUTPUT_TYPE
    assert check_structure([torch.zeros(3, 4)], ref).reason == Reason.WRONG_SHAPE
    assert check_structure([torch.zeros(4, 3, dtype=torch.float64)], ref).reason == Reason.WRONG_DTYPE
    assert check_structure([torch.zeros(4, 3), torch.zeros(1)], ref).reason == Reason.WRONG_SHAPE
    assert check_structure([[1.0]], ref).reason == Reason.WRONG_OUTPUT_TYPE


def test_values_tolerance_relnorm_and_nan() -> None:
    ref = torch.randn(64, 64, dtype=torch.float64)
    assert compare_values([ref.float()], [ref], TOL).ok
    bad = ref.float().clone()
    bad[3, 5] += 1.0
    cmp = compare_values([bad], [ref], TOL)
    assert cmp.reason == Reason.INCORRECT and "1/4096" in cmp.detail
    nan = ref.float().clone()
    nan[0, 0] = float("nan")
    assert compare_values([nan], [ref], TOL).reason == Reason.NAN_OUTPUT
    # bf16-rounded output: every element within a loose elementwise bound, caught by the relative norm
    loose = Tolerance(atol=1e-2, rtol=1e-2, relnorm=1e-5)
    assert compare_values([ref.to(torch.bfloat16).float()], [ref], loose).reason == Reason.INCORRECT


def test_inputs_unchanged_is_bitwise_and_nan_aware() -> None:
    x = torch.randn(10)
    x[2] = float("nan")
    snap = snapshot([x, 3])
    assert unchanged([x, 3], snap)
    x[0] += 1e-7 * max(1.0, abs(float(x[0])))
    assert not unchanged([x, 3], snap)


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_distributions_keep_shape_dtype_and_differ(dist: str) -> None:
    gen = torch.Generator().manual_seed(0)
    t = torch.empty(256, 64, dtype=torch.float16)
    a, b = sample_like(t, dist, gen), sample_like(t, dist, gen)
    assert a.shape == t.shape and a.dtype == t.dtype and torch.isfinite(a).all()
    assert not torch.equal(a, b)
    before = a.clone()
    refill_(a, dist, gen)
    assert a.shape == before.shape and not torch.equal(a, before) and torch.isfinite(a).all()


def test_resample_keeps_integer_and_non_tensor_inputs() -> None:
    idx = torch.arange(5)
    out = resample_inputs([torch.zeros(3), idx, 7], "uniform", 1)
    assert torch.equal(out[1], idx) and out[2] == 7 and out[0].abs().max() <= 1


def _fp16_accumulate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A.B with every partial sum rounded to fp16 (what an fp16-accumulating kernel does)."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for p in range(a.shape[1]):
        acc = (acc.float() + a[:, p:p + 1].float() * b[p:p + 1, :].float()).half()
    return acc


@pytest.mark.parametrize("k", [1024, 4096])
def test_accumulator_is_checked_numerically(k: int) -> None:
    """An fp16-accumulate result passes the fp16 task's tolerance and fails the fp32 task's."""
    cfg = EvalConfig()
    p32 = HgemmProblem(HgemmSpec(32, 32, k, "fp32"), "cpu", cfg)
    p16 = HgemmProblem(HgemmSpec(32, 32, k, "fp16"), "cpu", cfg)
    s = p32.make_set("normal", 0)
    ref = p32.reference(s)
    fp16_acc = _fp16_accumulate(s.args[0], s.args[1])
    fp32_acc = (s.args[0].float() @ s.args[1].float()).half()
    assert compare_values([fp32_acc], ref, p32.tolerance()).ok
    assert compare_values([fp16_acc], ref, p16.tolerance()).ok
    assert compare_values([fp16_acc], ref, p32.tolerance()).reason == Reason.INCORRECT
    assert p16.tolerance().relnorm == pytest.approx(
        max(cfg.correctness.hgemm_fp32_acc_relnorm, cfg.correctness.hgemm_fp16_acc_relnorm_per_sqrt_k * math.sqrt(k)))


def test_hgemm_guards_catch_out_of_bounds_writes() -> None:
    p = HgemmProblem(HgemmSpec(16, 8, 32, "fp32"), "cpu", EvalConfig())
    s = p.make_set("normal", 0)
    assert p.guards_intact(s)
    c = s.outputs[0]
    flat = c.view(-1)
    base = flat.untyped_storage()
    torch.tensor([], dtype=torch.float16).set_(base, flat.storage_offset() + flat.numel(), (1,))[0] = 1.0
    assert not p.guards_intact(s)
    # b_col_major is B^T's storage with B's shape (CUDA-L2's as_col_major)
    a, b, bcol = s.args
    assert bcol.shape == b.shape and torch.equal(bcol.reshape(8, 32), b.t())
