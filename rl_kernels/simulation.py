"""Simulated generation, builds, evaluations and learner steps, for scaling the real pipeline past
the hardware at hand (`cluster.simulate`; benchmarks/scale_sim.py).

Each class here stands behind the interface its real counterpart's actor already uses (the policy
backend's `generate` / `load_adapter`, the compile actor's build, the evaluator's `evaluate`, the
GRPO trainer's `train_step` / `save_adapter` / checkpoints), so the same actors, driver, replay
buffer, staleness books, placement groups and Ray scheduling run unchanged; only the work inside an
actor is replaced by a sleep drawn from a measured latency distribution (lognormal through a median
and a p90) and an outcome drawn from measured rates.  Simulated seconds run `time_scale` times
faster than wall seconds, so an hour of a 64-GPU pipeline takes a minute; the driver's own work is
not scaled, which is how the simulation finds the point where the driver becomes the bottleneck.

Nothing here imports torch: a simulated actor process costs Ray's own footprint, so a 2-core
machine holds the hundred-odd actors of a 64-GPU graph.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

from rl_kernels.config import LatencySpec, RewardConfig, SimulationConfig
from rl_kernels.evaluation.reward import measurement_reward
from rl_kernels.policy.base import Completion, Messages, SamplingParams
from rl_kernels.types import Build, Measurement, Task

_P90_Z = 1.2815515655446004      # the standard normal's 90th percentile


def draw(spec: LatencySpec, rng: random.Random) -> float:
    """One sample of the lognormal through the spec's median and p90."""
    sigma = math.log(spec.p90 / spec.median) / _P90_Z if spec.p90 > spec.median else 0.0
    return spec.median * math.exp(sigma * rng.gauss(0.0, 1.0))


def sleep_simulated(sim: SimulationConfig, seconds: float) -> float:
    """Sleeps `seconds` of simulated time (`time_scale` times fewer wall seconds); returns them."""
    time.sleep(seconds / sim.time_scale)
    return seconds


def _rng(sim: SimulationConfig) -> random.Random:
    """One stream per process: actors of one kind must not draw the same sequence."""
    return random.Random(f"{sim.seed}-{os.getpid()}-{time.monotonic_ns()}")


class SimulatedPolicy:
    """A generator's backend: a batch costs its longest completion's tokens at `tokens_per_s`;
    a completion parses with probability `parse_rate` (a fenced block under a Code header, a
    fresh source each time, so nothing is deduplicated away)."""

    def __init__(self, sim: SimulationConfig, max_loaded_adapters: int) -> None:
        self.sim, self.rng = sim, _rng(sim)
        self.max_loaded = max_loaded_adapters
        self._loaded = [0]

    def generate(self, prompts: list[Messages], params: SamplingParams, adapter_version: int) -> list[list[Completion]]:
        if adapter_version not in self._loaded:
            raise KeyError(adapter_version)
        lengths = [[max(1, int(draw(self.sim.completion_tokens, self.rng))) for _ in range(params.n)] for _ in prompts]
        sleep_simulated(self.sim, max(max(g) for g in lengths) / self.sim.tokens_per_s)
        return [[self._completion(n, adapter_version) for n in group] for group in lengths]

    def _completion(self, n_tokens: int, version: int) -> Completion:
        if self.rng.random() < self.sim.parse_rate:
            text = f"### Code\n```\n// simulated kernel {self.rng.getrandbits(64):016x}\n```\n"
        else:
            text = "no code here"
        return Completion(text=text, prompt_token_ids=[0], token_ids=[1] * n_tokens, logprobs=[0.0] * n_tokens,
                          adapter_version=version, finish_reason="stop", truncated=False)

    def load_adapter(self, version: int, path: Path) -> None:
        if version not in self._loaded:
            self._loaded = sorted([*self._loaded, version])
            # The base model (0) always stays; the newest max_loaded adapters beside it.
            self._loaded = [0] + [v for v in self._loaded if v][-self.max_loaded:]
        sleep_simulated(self.sim, self.sim.adapter_load_s)

    def loaded_versions(self) -> list[int]:
        return list(self._loaded)


class SimulatedBuilder:
    """A compile actor's work: `build_s` of simulated time; builds with probability `compile_rate`."""

    def __init__(self, sim: SimulationConfig) -> None:
        self.sim, self.rng = sim, _rng(sim)

    def build(self, task: Task, source: str) -> Build:
        seconds = sleep_simulated(self.sim, draw(self.sim.build_s, self.rng))
        ok = self.rng.random() < self.sim.compile_rate
        return Build(key=f"sim-{hash(source) & 0xFFFFFFFF:08x}", ok=ok, artifact=b"" if ok else None,
                     log="" if ok else "simulated compile error", seconds=seconds,
                     reason=None if ok else "compile_error")


class SimulatedEvaluator:
    """A timer's work: `eval_s` of simulated time on a device of its own; correct with probability
    `correct_rate`, at a speedup drawn from `speedup`, rewarded by the real reward function."""

    def __init__(self, sim: SimulationConfig, reward: RewardConfig, backend: str, mode: str) -> None:
        from rl_kernels.evaluation.device import DeviceIdentity

        self.sim, self.reward, self.backend, self.mode = sim, reward, backend, mode
        self.rng = _rng(sim)
        self.device = DeviceIdentity(name="simulated GPU", key=f"sim-{os.getpid()}-{time.monotonic_ns()}")

    def evaluate(self, task: Task, source: str, build: Build | None = None) -> Measurement:
        seconds = sleep_simulated(self.sim, draw(self.sim.eval_s, self.rng))
        m = Measurement(task=task.id, backend=self.backend, mode=self.mode, compiled=True,
                        device=self.device.name, eval_seconds=seconds, samples=1)
        if self.rng.random() < self.sim.correct_rate:
            m.correct, m.speedup = True, draw(self.sim.speedup, self.rng)
            m.baseline_ms, m.candidate_ms = 1.0, 1.0 / m.speedup
        else:
            m.rejected, m.detail = "incorrect", "simulated wrong output"
        m.reward = measurement_reward(m, self.reward)
        return m

    def close(self) -> None:
        """Nothing to release (the real evaluator's fork servers and workers)."""


class SimulatedTrainer:
    """The learner's trainer: a step costs its batch's completion tokens at `learner_tokens_per_s`
    of simulated time; publishes a one-file adapter (the generators' simulated backend only records
    its version)."""

    trainable_params = 0

    def __init__(self, sim: SimulationConfig) -> None:
        self.sim = sim

    def train_step(self, groups: list[Any], version: int) -> dict[str, float]:
        tokens = sum(len(t.token_ids) for g in groups for t in g.trajectories)
        seconds = sleep_simulated(self.sim, tokens / self.sim.learner_tokens_per_s)
        stale = [version - g.policy_version for g in groups]
        return {"learner/loss": 0.0, "learner/clip_fraction": 0.0, "learner/step_s": seconds,
                "learner/staleness_mean": sum(stale) / len(stale) if stale else 0.0,
                "learner/staleness_max": float(max(stale, default=0))}

    def save_adapter(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "adapter_config.json").write_text(json.dumps({"simulated": True}))

    def save_checkpoint(self, directory: Path, step: int, client_state: dict[str, Any]) -> Path:
        """Records the client state only: a simulated run is never resumed (no engine state exists)."""
        path = Path(directory) / f"sim-step-{step}"
        path.mkdir(parents=True, exist_ok=True)
        (path / "client_state.json").write_text(json.dumps(client_state, default=str))
        return path

    def load_checkpoint(self, directory: Path, step: int) -> dict[str, Any]:
        raise RuntimeError("a simulated learner has no engine state to resume: start the simulation afresh")
