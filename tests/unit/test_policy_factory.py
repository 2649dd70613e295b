"""PolicyConfig -> backend and sampling parameters: dtype translation, the unimplemented vLLM
backend named clearly, one group = group_size samples."""

from __future__ import annotations

import importlib.util

from pathlib import Path

import pytest
import torch
from tiny_model import save_tiny_llama

from rl_kernels.config import PolicyConfig
from rl_kernels.policy import SamplingParams
from rl_kernels.policy.delivery import DeliveryCheckedPolicy
from rl_kernels.policy.factory import make_policy, sampling_params, torch_dtype
from rl_kernels.policy.hf import HFPolicy


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(
    ("dtype", "device", "expected"),
    [
        ("auto", "cpu", torch.float32),
        ("auto", "cuda", torch.bfloat16),
        ("auto", "cuda:1", torch.bfloat16),
        ("float16", "cuda", torch.float16),
        ("bfloat16", "cpu", torch.bfloat16),
        ("float32", "cuda", torch.float32),
    ],
)
def test_torch_dtype(dtype: str, device: str, expected: torch.dtype) -> None:
    assert torch_dtype(dtype, device) == expected


@pytest.mark.parametrize(("dtype", "expected"), [("auto", torch.float32), ("bfloat16", torch.bfloat16)])
def test_make_policy_builds_hf(model_dir: Path, dtype: str, expected: torch.dtype) -> None:
    cfg = PolicyConfig(model=str(model_dir), dtype=dtype, batch_size=3)
    checked = make_policy(cfg, max_loaded_adapters=4)
    assert isinstance(checked, DeliveryCheckedPolicy) and checked.tolerance == cfg.delivery_tolerance
    policy = checked.backend
    assert isinstance(policy, HFPolicy)
    assert next(policy._model.parameters()).dtype == expected
    assert (policy._batch_size, policy._max_adapters) == (3, 4)
    assert policy.loaded_versions() == [0]


def test_sampling_params_take_the_group_size() -> None:
    cfg = PolicyConfig(group_size=6, max_new_tokens=64, temperature=0.9, top_p=0.95, top_k=20)
    assert sampling_params(cfg, seed=11) == SamplingParams(
        max_new_tokens=64, temperature=0.9, top_p=0.95, top_k=20, n=6, seed=11
    )
    assert sampling_params(cfg, seed=None).seed is None


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_make_policy_vllm_without_vllm_says_how_to_install_it(model_dir: Path) -> None:
    with pytest.raises(ImportError, match=r"pip install 'rl-kernels\[vllm\]'"):
        make_policy(PolicyConfig(backend="vllm", device="cuda", model=str(model_dir)), max_loaded_adapters=4)
