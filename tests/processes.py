"""Process checks shared by the sandbox tests.  Importable as `processes`: tests/ is on sys.path
through tests/conftest.py."""

from __future__ import annotations

import time
from pathlib import Path


def gone(pid: int, within_s: float) -> bool:
    """The process has exited (a zombie counts as exited) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False
