"""The worker starts with its working directory (the scratch dir, which the candidate can write) off
sys.path: a module planted there under the name of one the worker imports is never imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rl_kernels.evaluation import sandbox

PLANTED = "raise SystemExit('the planted module ran')"


def _plant(scratch: Path) -> None:
    package = scratch / "rl_kernels"
    package.mkdir()
    (package / "__init__.py").write_text(PLANTED)     # shadows the evaluator's own package
    (scratch / "secrets.py").write_text(PLANTED)       # a standard module the judge imports


def test_the_worker_never_imports_from_its_working_directory(tmp_path: Path) -> None:
    _plant(tmp_path)
    booted = subprocess.run([sys.executable, "-c", sandbox.WORKER_BOOT], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert "planted module ran" not in booted.stdout + booted.stderr
    # it got as far as its own command line, which names no job here
    assert booted.returncode != 0 and "IndexError" in booted.stderr, booted.stderr[-1500:]
    # control: `python -m` from the same directory imports the planted package
    plain = subprocess.run([sys.executable, "-m", "rl_kernels.evaluation.worker"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert "planted module ran" in plain.stdout + plain.stderr
