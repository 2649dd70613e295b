"""Stage 1 before stage 3 in one command: `train` with `sft.before_train` starts from a warm-start
adapter (or fully fine-tuned model), training it first when no run with the same inputs has made one.

The adapter is cached by content: the key hashes everything the warm start's result depends on (the
model, the sft / learner / prompt / split / backend settings, and the bytes of every source, the
packaged ladder and seeds of the configured backend included), so a changed ladder or learning rate
trains a new adapter and an unchanged one is reused in seconds.  The cached directory is a whole
warm-start run (`<cache>/<key>/sft/`: adapter or model, metrics.jsonl, report.json), so its report
stays beside it.

The cache is one machine's, so a run never points into it: `place_in_run` puts the warm start
inside the run directory (`RUN_DIR/warm_start/`), whose config then names that copy, and the run
directory stays whole when it moves to another machine (rl_kernels/run_dir.py).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import pickle
import queue
import shutil
import uuid
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

from filelock import FileLock

from rl_kernels.learner.warm_start import REPORT, SFT_DIR, output_name, run_warm_start
from rl_kernels.config import Config, default_cache_dir as cache_home
from rl_kernels.evaluation.sandbox import die_with_parent
from rl_kernels.tasks.ladder import LADDER_DIR
from rl_kernels.tasks.suites import BUILTIN_DIR


RUN_WARM_START = "warm_start"   # the run directory's copy of its warm start (adapter or model, report.json)


@dataclass(frozen=True)
class WarmStart:
    output: Path              # the adapter directory, or the model directory after full fine-tuning
    report: dict[str, Any]    # its report.json (what was verified, the loss curve, the sampled rates)
    reused: bool              # found in the cache rather than trained by this call


def default_cache_dir() -> Path:
    """Beside the builds, under $RL_KERNELS_CACHE when it is set: one variable moves both."""
    return cache_home() / "warm-start"


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
        if src.kind == "builtin":   # it reads the configured backend's ladder and seeds only
            _hash_tree(h, LADDER_DIR / cfg.eval.backend)
            _hash_tree(h, BUILTIN_DIR / "seeds" / cfg.eval.backend)
        elif src.path is not None:
            if not Path(src.path).exists():
                raise FileNotFoundError(f"sft source {src.kind} {src.path} does not exist")
            _hash_tree(h, Path(src.path))
    return h.hexdigest()[:20]


def cached_warm_start(cfg: Config, progress: Callable[[str], None]) -> WarmStart:
    """The warm start for this config: the cached one, or a new one trained now."""
    root = Path(cfg.sft.cache_dir or default_cache_dir()) / warm_start_key(cfg)
    output = root / SFT_DIR / output_name(cfg)
    report = root / SFT_DIR / REPORT
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):   # two runs started together train it once
        # The report is written last: weights without it are an earlier epoch of a run that stopped.
        if report.is_file():
            progress(f"warm start: reusing {output} (same model, data and settings)")
            return WarmStart(output, json.loads(report.read_text()), reused=True)
        progress(f"warm start: no {output.name} for these inputs yet; training one in {root} (stage 1, then train)")
        return WarmStart(output, warm_start_in_child(cfg.model_copy(update={"run_dir": root}), progress), reused=False)


def warm_start_in_child(cfg: Config, progress: Callable[[str], None]) -> dict[str, Any]:
    """`run_warm_start` in a fresh process, its progress lines relayed here as they come: the
    model, the optimizer state (every weight's, with full fine-tuning) and the distributed world it
    sets up all go back to the system before stage 3 starts its actors beside this process."""
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    child = ctx.Process(target=_child, args=(cfg, messages, os.getpid()), name="rl-kernels-warm-start")
    child.start()
    try:
        while True:
            try:
                kind, payload = messages.get(timeout=5.0)
            except queue.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the warm-start process died (exit code {child.exitcode}) before "
                                       "reporting; its last lines are above") from None
                continue
            if kind == "line":
                progress(payload)
            elif kind == "error":
                raise payload
            else:
                return payload
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()


def _child(cfg: Config, messages: Any, parent: int) -> None:
    # A killed `train` (SIGTERM or SIGKILL skip the parent's cleanup) must not leave stage 1 training
    # on, holding the cores and gigabytes the next job needs.
    die_with_parent()
    if os.getppid() != parent:
        return
    try:
        messages.put(("report", run_warm_start(cfg, lambda line: messages.put(("line", line)))))
    except BaseException as exc:  # noqa: BLE001 - relayed to the parent, which raises it
        try:
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that cannot cross processes
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        messages.put(("error", exc))


def place_in_run(warm: WarmStart, run_dir: Path) -> WarmStart:
    """The warm start copied into `run_dir/warm_start/` (its adapter or model directory, and its
    report.json), so the run's config names a path that travels with the run directory. Files are
    hard-linked where the cache shares the file system (a finished warm start is never rewritten,
    and a full fine-tune's model is hundreds of MB), else copied; an earlier placement is replaced
    whole, never seen half-written."""
    target = Path(run_dir) / RUN_WARM_START
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    shutil.copytree(warm.output, tmp / warm.output.name, copy_function=_link_or_copy)
    (tmp / REPORT).write_text(json.dumps(warm.report, indent=1))
    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
    return WarmStart(target / warm.output.name, warm.report, warm.reused)


def _link_or_copy(src: str, dst: str) -> str:
    """A hard link to `src` at `dst`, or a copy where linking fails (another file system)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def start_from(cfg: Config, warm: WarmStart) -> Config:
    """The config stage 3 runs with: the adapter merged in as policy.init_adapter, or the fully
    fine-tuned model as policy.model."""
    update = {"model": str(warm.output)} if cfg.sft.full_finetune else {"init_adapter": warm.output}
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update=update)})
