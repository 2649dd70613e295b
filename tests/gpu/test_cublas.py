"""cuBLAS / cuBLASLt hgemm baselines against torch.matmul and the fp32 reference, both accumulators.

(How cuBLAS is located is tested without a GPU in tests/unit/test_hgemm_tasks.py.)"""

from __future__ import annotations

import pytest
import torch

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.cublas import CublasBaselines, build_cublas_library, load_cublas_baselines


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> CublasBaselines:
    cfg = EvalConfig(backend="cuda")
    major, minor = torch.cuda.get_device_capability()
    cfg.build.cuda_archs = [f"sm_{major}{minor}{'a' if major >= 9 else ''}"]
    cfg.build.cache_dir = tmp_path_factory.mktemp("cublas-cache")
    return load_cublas_baselines(cfg, build_cublas_library(cfg.build))


SHAPES = [(64, 64, 64), (128, 256, 512), (1024, 512, 256), (512, 4096, 1024), (4096, 64, 4096)]
METHODS = ["gemmex", "lt_heuristic", "lt_autotuned"]


def _operands(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).half()
    b = (torch.randn(k, n, device="cuda", generator=gen) * k ** -0.25).half()
    return a, b


def _relnorm(c: torch.Tensor, ref: torch.Tensor) -> float:
    return ((c.float() - ref).norm() / ref.norm()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("acc", ["fp16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_baseline_matches_matmul(baselines: CublasBaselines, method: str, acc: str,
                                 shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b = _operands(m, n, k)
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    getattr(baselines, method)(a, b, c, acc)
    getattr(baselines, method)(a, b, c, acc)  # second call: cached plan / tuned algorithm
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    tol = EvalConfig().correctness
    bound = tol.hgemm_fp32_acc_relnorm if acc == "fp32" else tol.hgemm_fp16_acc_relnorm_per_sqrt_k * k ** 0.5
    assert _relnorm(c, ref) < bound
    if acc == "fp32":  # same precision as torch.matmul: only summation order and final rounding differ
        torch.testing.assert_close(c, torch.matmul(a, b), rtol=1e-2, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("method", METHODS)
def test_fp16_accumulate_is_measurably_less_precise(baselines: CublasBaselines, method: str) -> None:
    m, n, k = 256, 256, 4096
    a, b = _operands(m, n, k)
    ref = a.float() @ b.float()
    errs = {}
    for acc in ("fp16", "fp32"):
        c = torch.empty(m, n, dtype=torch.float16, device="cuda")
        getattr(baselines, method)(a, b, c, acc)
        torch.cuda.synchronize()
        errs[acc] = _relnorm(c, ref)
    assert errs["fp16"] > 2 * errs["fp32"], errs


@pytest.mark.gpu
def test_bad_arguments_raise(baselines: CublasBaselines) -> None:
    a, b = _operands(64, 64, 64)
    c = torch.empty(64, 64, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="accumulator"):
        baselines.gemmex(a, b, c, "tf32")
    with pytest.raises(ValueError, match="shapes do not chain"):
        baselines.lt_heuristic(a, b[:32].contiguous(), c, "fp32")
    with pytest.raises(ValueError, match="contiguous 2-D fp16 CUDA"):
        baselines.lt_autotuned(a.float(), b, c, "fp32")
