"""Where policy versions live on disk and how they appear there: `run_dir/adapters/policy-v{k}/`.

A generator may load a version the moment it is announced, so a version directory must never be
seen half-written: the adapter is saved into a hidden temporary directory next to its final place
and renamed into it (a rename within one file system is atomic). Re-publishing a version (after a
resume, the lost steps' versions are trained again) swaps the new directory in the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from rl_kernels.policy import adapter_name

ADAPTERS = "adapters"
_VERSION_DIR = re.compile(r"^policy-v(\d+)$")


def adapter_dir(run_dir: Path, version: int) -> Path:
    return Path(run_dir) / ADAPTERS / adapter_name(version)


def publish_adapter(save: Callable[[Path], None], run_dir: Path, version: int) -> Path:
    """Write version `version` with `save(directory)` and make it appear atomically; returns its path."""
    target = adapter_dir(run_dir, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    save(tmp)
    if not (tmp / "adapter_config.json").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"saving adapter v{version} wrote no adapter_config.json into {tmp}")
    _fsync_tree(tmp)
    if target.exists():
        old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old)
    else:
        os.rename(tmp, target)
    return target


def published_versions(run_dir: Path) -> list[int]:
    root = Path(run_dir) / ADAPTERS
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _VERSION_DIR.match(p.name)))


def prune_adapters(run_dir: Path, keep: set[int]) -> list[int]:
    """Delete every published version not in `keep` (and leftovers of interrupted publishes);
    returns the deleted versions."""
    root = Path(run_dir) / ADAPTERS
    gone = [v for v in published_versions(run_dir) if v not in keep]
    for v in gone:
        shutil.rmtree(adapter_dir(run_dir, v))
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(".policy-v"):
                shutil.rmtree(p, ignore_errors=True)
    return gone


def _fsync_tree(directory: Path) -> None:
    """Flush the adapter's files before the rename publishes them (a crash must not leave a
    published version with empty files)."""
    for p in directory.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
