"""torch.compile's output for a task's baselines, kept between evaluations.

Every evaluation runs in a fresh worker, so a `compile` baseline was compiled from nothing each
time: most of a module evaluation's wall time on an H200 (~20 s of ~25 s), and a fresh compile
(inductor's choices, triton's autotuning) in every evaluation. The evaluator keeps inductor's and
triton's cache dirs per task instead. Inductor writes absolute cache paths into the code it
generates (its autotuning results, for one), so a worker sees its caches at one fixed path per
device (`KeptCompile.workdir`). Under namespaces each worker's own directory (in its scratch dir)
is bound there (`sandbox.StartedWorker.compile_dir`); under `process` isolation the fixed directory
itself is used, by one evaluation at a time under the device lock. Before a job the evaluator
empties the worker's directory and copies the task's kept files in (`seed`), unless the worker
made its problem ahead from the same files; the worker lists what it holds, with each file's
sha256, once the baseline is compiled and warm and before any candidate code is loaded
(`manifest`); afterwards the evaluator stores the listed files whose bytes still match (`harvest`)
and empties the directory. A candidate that rewrites a cache file after its evaluation's listing
changes nothing that is kept, and under namespaces no other worker ever reads it; the store itself
lies in the build cache, which the worker cannot see.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The sub-directories that TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR point at.
CACHE_DIRS = ("inductor", "triton")


@dataclass(frozen=True)
class KeptCompile:
    store: Path     # the task's kept files (in the build cache)
    workdir: Path   # the fixed path a worker sees its compile dir at (one per device)


def env_dirs() -> list[Path]:
    """The compile cache dirs this process was given (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR)."""
    return [Path(os.environ[k]) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR") if os.environ.get(k)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def empty(workdir: Path) -> None:
    """Removes everything under `workdir` but keeps the directory itself: a worker started before
    its job has it bound into its namespace, and a new directory of the same name would not be."""
    workdir.mkdir(parents=True, exist_ok=True)
    for child in workdir.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def seed(store: Path, workdir: Path) -> None:
    """Empties `workdir` and copies the task's kept caches in (copies: the worker may write them)."""
    empty(workdir)
    for name in CACHE_DIRS:
        if (store / name).is_dir():
            shutil.copytree(store / name, workdir / name, symlinks=False)
        else:
            (workdir / name).mkdir()


def manifest(workdir: Path) -> dict[str, str]:
    """Relative path -> sha256 of every regular file in the compile caches under `workdir`."""
    listed = {}
    for name in CACHE_DIRS:
        root = workdir / name
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                listed[str(path.relative_to(workdir))] = _sha256(path)
    return listed


def _safe(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and parts[0] in CACHE_DIRS and ".." not in parts and not Path(rel).is_absolute()


def harvest(store: Path, workdir: Path, listed: dict[str, str]) -> int:
    """Stores the listed files the store lacks whose bytes still match their listing; returns how
    many were stored.  Writes go through a temporary name and a rename, so evaluators sharing the
    cache never see half a file."""
    stored = 0
    for rel, digest in listed.items():
        if not _safe(rel):
            continue
        src, dst = workdir / rel, store / rel
        if dst.exists() or not src.is_file() or src.is_symlink():
            continue
        data = src.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=".part-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dst)
        stored += 1
    return stored
