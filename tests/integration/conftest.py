"""Shared fixtures: one build cache for the whole session (the torch PCH is built once), and a
local Ray cluster per module for the driver tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rl_kernels.config import EvalConfig, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rlk-cache")


@pytest.fixture(scope="session")
def cpu_config(cache_dir: Path) -> EvalConfig:
    # No worker started ahead: each test builds its own evaluators, and a worker started for a next
    # job that never comes is a process importing torch for nothing on the 2-core machine; the
    # tests of started workers (test_standby_cpu.py) and the Ray pipeline's use local.yaml's.
    cfg = load_config(REPO / "configs" / "local.yaml", [f"eval.build.cache_dir={cache_dir}",
                                                         "eval.sandbox.timeout_s=120", "eval.sandbox.prestart=off"])
    return cfg.eval


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A CPU-only local Ray with room for the embedded default's graph (a module that needs other
    resources defines its own `ray_cluster`)."""
    import ray

    ray.init(address="local", num_cpus=6, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
