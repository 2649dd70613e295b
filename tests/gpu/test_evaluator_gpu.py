"""The cuda backend end to end: honest kernels pass (CUTLASS/CuTe sm_90a included) and every GPU
hgemm reward hack is rejected, through the whole evaluator.  Skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from rl_kernels.config import EvalConfig, load_config
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.tasks import get_task

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
CANDIDATES = REPO / "tests" / "candidates"


@pytest.fixture(scope="module")
def cuda_config(tmp_path_factory: pytest.TempPathFactory) -> EvalConfig:
    cache = tmp_path_factory.mktemp("rlk-cuda-cache")
    major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    arch = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return load_config(REPO / "configs" / "h200.yaml",
                       [f"eval.build.cache_dir={cache}", f"eval.build.cuda_archs=[{arch}]"]).eval


def _cuda_hacks() -> list[dict]:
    data = yaml.safe_load((CANDIDATES / "hacks" / "manifest.yaml").read_text())["hacks"]
    return [e for e in data if e["backend"] == "cuda" and "task" in e]


@pytest.mark.parametrize("path, task_id", [
    ("honest/hgemm_cuda_fp32.cu", "hgemm/fp32/1024_1024_1024"),
    ("hgemm/wmma_fp32acc.cu", "hgemm/fp32/4096_4096_4096"),
    ("hgemm/cute_sm90.cu", "hgemm/fp32/4096_4096_4096"),
])
def test_honest_cuda_kernels_pass(path: str, task_id: str, cuda_config: EvalConfig) -> None:
    m = Evaluator(cuda_config).evaluate(get_task(task_id), (CANDIDATES / path).read_text())
    assert m.rejected is None, m.detail[-1500:]
    assert m.correct and m.samples >= 30 and m.sm_clock_mhz is not None
    assert m.baseline in cuda_config.baselines.hgemm


@pytest.mark.parametrize("entry", _cuda_hacks(), ids=lambda e: e["file"])
def test_cuda_hack_rejected(entry: dict, cuda_config: EvalConfig) -> None:
    m = Evaluator(cuda_config).evaluate(get_task(entry["task"]), (CANDIDATES / "hacks" / entry["file"]).read_text())
    if entry.get("inert") and m.rejected is None:
        return
    assert m.rejected in entry["expected"], f"{entry['file']}: {m.rejected} {m.detail[:500]}"
