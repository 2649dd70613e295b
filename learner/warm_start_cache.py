"""Stage 1 before stage 3 in one command: `train` with `sft.before_train` starts from a warm-start
adapter, training it first when no run with the same inputs has made one.

The adapter is cached by content: the key hashes everything the warm start's result depends on (the
model, the sft / learner / prompt / split / backend settings, and the bytes of every source, the
packaged ladder included), so a changed ladder or learning rate trains a new adapter and an
unchanged one is reused in seconds.  The cached directory is a whole warm-start run
(`<cache>/<key>/sft/`: adapter, metrics.jsonl, report.json), so its report stays beside it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock

from learner.warm_start import REPORT, SFT_DIR, run_warm_start
from rl_kernels.config import Config
from rl_kernels.tasks.ladder import LADDER_DIR
from rl_kernels.tasks.suites import BUILTIN_DIR

ADAPTER_CONFIG = "adapter_config.json"


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "rl_kernels" / "warm-start"


def _hash_tree(h: Any, root: Path) -> None:
    """Every file below root (or root itself), by relative path and bytes, in a fixed order."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for f in files:
        if "__pycache__" in f.parts:
            continue
        h.update(str(f.relative_to(root) if root.is_dir() else f.name).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())


def warm_start_key(cfg: Config) -> str:
    """What the warm start's adapter depends on, hashed; equal keys give interchangeable adapters."""
    settings = {
        "model": cfg.policy.model, "backend": cfg.eval.backend,
        "sft": cfg.sft.model_dump(mode="json", exclude={"before_train", "cache_dir"}),
        "learner": cfg.learner.model_dump(mode="json"), "prompts": cfg.prompts.model_dump(mode="json"),
        "split": cfg.split.model_dump(mode="json"), "max_new_tokens": cfg.policy.max_new_tokens,
    }
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for src in cfg.sft.sources:
        if src.kind == "builtin":
            _hash_tree(h, LADDER_DIR)
            _hash_tree(h, BUILTIN_DIR / "seeds")
        elif src.path is not None:
            if not Path(src.path).exists():
                raise FileNotFoundError(f"sft source {src.kind} {src.path} does not exist")
            _hash_tree(h, Path(src.path))
    return h.hexdigest()[:20]


def cached_warm_start(cfg: Config, progress: Callable[[str], None]) -> Path:
    """The warm-start adapter for this config: the cached one, or a new one trained now."""
    root = Path(cfg.sft.cache_dir or default_cache_dir()) / warm_start_key(cfg)
    adapter = root / SFT_DIR / "adapter"
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):   # two runs started together train it once
        # The report is written last: an adapter without it is an earlier epoch of a run that stopped.
        if (adapter / ADAPTER_CONFIG).is_file() and (root / SFT_DIR / REPORT).is_file():
            progress(f"warm start: reusing {adapter} (same model, data and settings)")
            return adapter
        progress(f"warm start: no adapter for these inputs yet; training one in {root} (stage 1, then train)")
        run_warm_start(cfg.model_copy(update={"run_dir": root}), progress)
    return adapter
