"""Trainer checkpoints on disk: `<directory>/step-<n>/`, one DeepSpeed engine state each.

Both trainers that run for more than one sitting checkpoint here: the GRPO learner (every
`train.checkpoint_every` steps) and self-training (after every round that trained).  A checkpoint
holds what the engine trains (the LoRA weights; frozen base weights are left out), the optimizer
moments, the LR schedule, the caller's client state and the process RNGs, so a resumed run takes
the step the stopped one would have taken.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # the engine (torch, DeepSpeed) is the caller's; listing checkpoints needs neither
    from rl_kernels.learner.engine import PolicyEngine

CHECKPOINTS = "checkpoints"   # the run directory's folder of them
CHECKPOINT_PREFIX = "step-"


def save_checkpoint(pe: PolicyEngine, directory: Path, step: int, client_state: dict[str, Any]) -> Path:
    """The engine's state plus `client_state` and the RNGs, under tag `step-{step}`."""
    tag = f"{CHECKPOINT_PREFIX}{step}"
    state = {**client_state, "rng": _rng_state(), "optimizer_steps": pe.optimizer_steps}
    pe.engine.save_checkpoint(str(directory), tag=tag, client_state=state, exclude_frozen_parameters=True)
    return Path(directory) / tag


def load_checkpoint(pe: PolicyEngine, directory: Path, step: int) -> dict[str, Any]:
    """Restore `step-{step}` into the engine; returns its client state (the RNGs already restored)."""
    tag = f"{CHECKPOINT_PREFIX}{step}"
    path, state = pe.engine.load_checkpoint(str(directory), tag=tag, load_module_strict=False)
    if path is None:
        raise FileNotFoundError(f"no loadable DeepSpeed checkpoint {tag} under {directory}")
    _set_rng_state(state["rng"])
    pe.optimizer_steps = int(state["optimizer_steps"])
    return state


def checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints under `directory`, ascending."""
    root = Path(directory)
    if not root.is_dir():
        return []
    steps = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX) and p.name[len(CHECKPOINT_PREFIX):].isdigit():
            if any(f.name.endswith("model_states.pt") for f in p.iterdir()):
                steps.append(int(p.name[len(CHECKPOINT_PREFIX):]))
    return sorted(steps)


def rotate_checkpoints(directory: Path, keep: int) -> list[int]:
    """Delete all but the newest `keep` checkpoints; returns the deleted steps."""
    gone = checkpoint_steps(directory)[:-keep]
    for step in gone:
        shutil.rmtree(Path(directory) / f"{CHECKPOINT_PREFIX}{step}")
    return gone


def python_rng_state(state: Any) -> tuple[Any, ...]:
    """random.Random state for `setstate` after a round trip through a checkpoint (tuples may come
    back as lists)."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
