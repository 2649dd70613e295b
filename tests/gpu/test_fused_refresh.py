"""The fused HGEMM input refresh: B^T is B's transpose, values follow the named distribution, every
refresh gives new values, and the evaluator's HGEMM problem uses it on a GPU."""

from __future__ import annotations

import pytest
import torch

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation import fused_refresh
from rl_kernels.evaluation.problems import HgemmProblem
from rl_kernels.types import HgemmSpec


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(512, 768), (1000, 333), (64, 4096)])
def test_transposed_copy_matches(shape: tuple[int, int]) -> None:
    rows, cols = shape
    b = torch.empty(rows, cols, dtype=torch.float16, device="cuda")
    bt = torch.empty(cols, rows, dtype=torch.float16, device="cuda")
    fused_refresh.fill_(b, "normal", seed=11, scale=0.5, transposed_copy=bt)
    assert torch.equal(bt, b.t().contiguous())
    assert not torch.isnan(b).any()


@pytest.mark.gpu
@pytest.mark.parametrize("dist,mean,std,lo,hi", [
    ("normal", 0.0, 1.0, -7.0, 7.0),
    ("uniform", 0.0, 1 / 3 ** 0.5, -1.0, 1.0),
    ("heavy_tailed", 0.0, None, -10.0, 10.0),
    ("mixed_sign", 0.0, None, -80.0, 80.0),
])
def test_distributions(dist: str, mean: float, std: float | None, lo: float, hi: float) -> None:
    x = torch.empty(2048, 2048, dtype=torch.float32, device="cuda")
    fused_refresh.fill_(x, dist, seed=5)
    assert abs(x.mean().item() - mean) < 0.05
    if std is not None:
        assert abs(x.std().item() - std) < 0.01
    assert lo <= x.min().item() and x.max().item() <= hi
    if dist == "mixed_sign":   # row scales span 10^-1 .. 10^1
        row_std = x.std(dim=1)
        assert row_std.max().item() / row_std.min().item() > 20
    if dist == "heavy_tailed":  # much heavier tails than a normal
        assert (x.abs() > 3).float().mean().item() > 0.05


@pytest.mark.gpu
def test_every_refresh_is_new_and_seeded() -> None:
    x, y = (torch.empty(256, 256, device="cuda") for _ in range(2))
    fused_refresh.fill_(x, "normal", seed=1)
    fused_refresh.fill_(y, "normal", seed=1)
    assert torch.equal(x, y)
    fused_refresh.fill_(y, "normal", seed=9)
    assert not torch.equal(x, y)


@pytest.mark.gpu
def test_hgemm_problem_uses_fused_refresh() -> None:
    cfg = EvalConfig(backend="cuda")
    problem = HgemmProblem(HgemmSpec(256, 512, 128, "fp32"), "cuda", cfg)
    s = problem.make_set("normal", 3)
    a0 = s.args[0].clone()
    problem.refresh(s, "normal", torch.Generator(device="cuda").manual_seed(3))
    a, b, b_col_major = s.args
    assert problem.refreshes == 2 and not torch.equal(a, a0)
    assert torch.equal(b_col_major.view(512, 128), b.t().contiguous())
    assert abs(a.float().std().item() - 128 ** -0.25) < 0.01


@pytest.mark.gpu
def test_rejects_bad_input() -> None:
    x = torch.empty(64, 64, device="cuda")
    with pytest.raises(ValueError, match="distribution"):
        fused_refresh.fill_(x, "cauchy", seed=1)
    with pytest.raises(ValueError, match="2-D"):
        fused_refresh.fill_(x.t(), "normal", seed=1)
