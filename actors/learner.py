"""Learner actor: one process holding the GRPO trainer (learner/trainer.py) and the run's adapters.

Thin on purpose: the loss, the engine, adapter publishing and checkpoint files are `learner/`'s,
tested without Ray. This actor adds the process (a DeepSpeed world of one) and the version
counter: every `publish_every` learner steps it publishes the next version atomically under
`run_dir/adapters/policy-v{k}` and returns its path, which the driver announces to the buffer and
the generators. Old versions are pruned: only the last `keep_versions` and those a kept
checkpoint points at stay on disk.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray

from rl_kernels.learner.publish import adapter_dir, prune_adapters, publish_adapter, published_versions
from rl_kernels.learner.checkpoints import CHECKPOINTS, checkpoint_steps, rotate_checkpoints
from rl_kernels.config import Config
from rl_kernels.host_share import host_share
from rl_kernels.placement import learner_resources
from rl_kernels.trajectories import Group


@ray.remote(max_concurrency=1)
class LearnerActor:
    def __init__(self, cfg: Config, keep_versions: int) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.keep_versions = keep_versions
        if cfg.cluster.simulate is not None:
            from rl_kernels.simulation import SimulatedTrainer

            self.trainer = SimulatedTrainer(cfg.cluster.simulate)
        else:
            from rl_kernels.learner.trainer import GrpoTrainer   # torch and DeepSpeed: only for real steps

            self.trainer = GrpoTrainer(cfg.policy.model, cfg.learner, cfg.grpo, temperature=cfg.policy.temperature,
                                       total_steps=cfg.train.max_steps, init_adapter=cfg.policy.init_adapter,
                                       host=host_share(cfg.eval), reward=cfg.eval.reward,
                                       probe_magnify_to=cfg.policy.delivery_magnify_to)
        self.step = 0
        self.version = 0
        self._checkpoint_versions: dict[int, int] = {}   # checkpoint step -> its policy version

    def ready(self) -> dict[str, Any]:
        return {"model": self.cfg.policy.model, "device": self.cfg.learner.device,
                "trainable_params": self.trainer.trainable_params}

    def train_step(self, groups: list[Group]) -> dict[str, Any]:
        """One learner step on `groups`; publishes a new version when one is due.

        Returns the step's metrics plus "step", "version" and "adapter_path" (None when this step
        published nothing)."""
        stats = self.trainer.train_step(groups, self.version)
        self.step += 1
        path = None
        if self.step % self.cfg.learner.publish_every == 0:
            t0 = time.monotonic()
            self.version += 1
            path = str(publish_adapter(self.trainer.save_adapter, self.run_dir, self.version))
            stats["learner/publish_s"] = time.monotonic() - t0
            self._prune()
        return {**stats, "step": self.step, "version": self.version, "adapter_path": path}

    def save_checkpoint(self, client_state: dict[str, Any]) -> str:
        """Engine + `client_state` (the driver's: buffer, rng, tallies) at the current step."""
        directory = self.run_dir / CHECKPOINTS
        state = {**client_state, "step": self.step, "version": self.version}
        path = self.trainer.save_checkpoint(directory, self.step, state)
        self._checkpoint_versions[self.step] = self.version
        for gone in rotate_checkpoints(directory, self.cfg.train.keep_checkpoints):
            self._checkpoint_versions.pop(gone, None)
        self._prune()
        return str(path)

    def resume(self) -> dict[str, Any] | None:
        """Load the newest checkpoint, if any; returns its client state (None: nothing to resume).

        Versions published after it belong to steps that are lost and will be trained again, so
        their adapters are deleted now and re-published under the same numbers later."""
        directory = self.run_dir / CHECKPOINTS
        steps = checkpoint_steps(directory)
        if not steps:
            return None
        state = self.trainer.load_checkpoint(directory, steps[-1])
        self.step, self.version = int(state["step"]), int(state["version"])
        self._checkpoint_versions[self.step] = self.version
        prune_adapters(self.run_dir, keep={v for v in published_versions(self.run_dir) if v <= self.version})
        if self.version > 0 and not (adapter_dir(self.run_dir, self.version) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"checkpoint step-{self.step} points at policy v{self.version}, but "
                                    f"{adapter_dir(self.run_dir, self.version)} is missing")
        return state

    def _prune(self) -> None:
        newest = {v for v in published_versions(self.run_dir) if v > self.version - self.keep_versions}
        prune_adapters(self.run_dir, keep=newest | set(self._checkpoint_versions.values()))


def learner_options(cfg: Config) -> dict[str, Any]:
    """Ray options: the learner's GPUs, and no restarts (the driver resumes from a checkpoint)."""
    cpus, gpus = learner_resources(cfg.learner)
    return {"num_gpus": gpus, "num_cpus": cpus, "max_restarts": 0}
