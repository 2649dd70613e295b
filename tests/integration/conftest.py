"""Shared fixtures: one build cache for the whole session (the torch PCH is built once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_kernels.config import EvalConfig, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rlk-cache")


@pytest.fixture(scope="session")
def cpu_config(cache_dir: Path) -> EvalConfig:
    cfg = load_config(REPO / "configs" / "local.yaml", [f"eval.build.cache_dir={cache_dir}",
                                                         "eval.sandbox.timeout_s=120"])
    return cfg.eval
