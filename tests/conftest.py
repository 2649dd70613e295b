"""Test tiers: unit (no Ray), integration (real builds, cpu backend), gpu (skipped without CUDA).

`slow` tests take tens of seconds or more each on 2 cores (torch-extension builds, the longest Ray
jobs; each says why it may be left out); `make test` skips them so the default run stays under 20
minutes, `--runslow` (`make test-all`) runs them.
"""

from __future__ import annotations

import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="also run every @pytest.mark.slow test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_gpu = pytest.mark.skip(reason="needs a CUDA device")
    no_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(no_slow)
