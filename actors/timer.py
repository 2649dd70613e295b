"""Timer actor: one per device, the only process that times candidates on it (DESIGN.md "Data flow").

Thin on purpose: isolation, correctness, interleaved timing and reward are `Evaluator.evaluate`,
tested without Ray. What this actor adds is ownership of a device:

- It holds an exclusive "owner" lock on its device for its whole life, so a second timer on the
  same GPU (or the same pinned cpu core set) fails at start with `DeviceBusyError`. The lock is a
  sibling of `device_lock`'s file (`<device lock>.timer`), not that file itself: the evaluator
  takes `device_lock` around every measurement through a fresh FileLock instance, and flock locks
  held by two instances in one process exclude each other, so holding it here would deadlock the
  first measurement. Other processes (`rl-kernels eval` / `bench`) still queue on `device_lock`.
- `max_concurrency=1`: one evaluation at a time per device, never two timed runs overlapping.
  `ready` and `stats` run in a separate "control" group so they answer while an evaluation runs
  (a liveness ping must not queue behind a 30 s measurement).
- A crashing or hanging candidate costs only itself (the sandbox subprocess); the actor keeps going.
  If the actor itself dies, Ray restarts it (`max_restarts`) and the caller retries the in-flight
  candidate once through `evaluate_or_fail`, then records it as `timer_failed`.

It never compiles: it is given the `Build` (an ObjectRef from a compile actor, so the artifact
arrives through the object store).
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray
from filelock import FileLock, Timeout

from rl_kernels.actors.restarts import call_surviving_restarts
from rl_kernels.config import EvalConfig, SimulationConfig
from rl_kernels.evaluation.device import device_lock
from rl_kernels.evaluation.reward import measurement_reward
from rl_kernels.placement import timer_resources
from rl_kernels.types import Build, Measurement, Task

TIMER_FAILED = "timer_failed"  # reason code: the timer died twice while evaluating this candidate


class DeviceBusyError(RuntimeError):
    """Another timer already owns this device; two timers on one device would corrupt both timings."""


@ray.remote(max_concurrency=1, concurrency_groups={"control": 1})
class TimerActor:
    """Owns one device. Create it with `timer_options(cfg, ...)` so it gets the device's resources;
    `simulate` (`cluster.simulate`) owns a simulated device and draws its measurements
    (rl_kernels/simulation.py)."""

    def __init__(self, cfg: EvalConfig, lock_timeout_s: float = 10.0, simulate: SimulationConfig | None = None) -> None:
        if simulate is not None:
            from rl_kernels.simulation import SimulatedEvaluator

            self.evaluator = SimulatedEvaluator(simulate, cfg.reward, cfg.backend, cfg.timing.mode)
        else:
            from rl_kernels.evaluation.evaluator import Evaluator   # torch: only for real evaluations

            self.evaluator = Evaluator(cfg)
        device = self.evaluator.device
        # A short wait (not zero) lets a restarted timer take over from its dying predecessor.
        self._owner = FileLock(device_lock(device, cfg).lock_file + ".timer")
        try:
            self._owner.acquire(timeout=lock_timeout_s)
        except Timeout:
            raise DeviceBusyError(
                f"device {device.name} (key {device.key}) already has a timer: {self._owner.lock_file} "
                f"is held by another process; run one timer per device") from None
        self._evaluations = 0
        self._in_flight: str | None = None  # task id being evaluated now (read by `stats`)
        self._busy_s = 0.0
        self._started = time.monotonic()

    @ray.method(concurrency_group="control")
    def ready(self) -> str:
        """The device this timer owns; resolves once the lock is held (creation errors surface here)."""
        return self.evaluator.device.name

    def evaluate(self, task: Task, source: str, build: Build) -> Measurement:
        t0 = time.monotonic()
        self._in_flight = task.id
        try:
            return self.evaluator.evaluate(task, source, build=build)
        finally:
            self._in_flight = None
            self._evaluations += 1
            self._busy_s += time.monotonic() - t0

    @ray.method(concurrency_group="control")
    def stats(self) -> dict[str, Any]:
        """Busy fraction since this process started (resets when Ray restarts the actor; `pid` and
        `restarted` tell a restarted timer from the original)."""
        alive = time.monotonic() - self._started
        return {"device": self.evaluator.device.name, "pid": os.getpid(),
                "restarted": ray.get_runtime_context().was_current_actor_reconstructed,
                "in_flight": self._in_flight, "evaluations": self._evaluations,
                "busy_s": self._busy_s, "busy_fraction": self._busy_s / alive if alive > 0 else 0.0}


def timer_options(cfg: EvalConfig, *, max_restarts: int) -> dict[str, Any]:
    """Ray options for a timer: a whole GPU on cuda (never shared with vLLM or the learner), one core on cpu."""
    cpus, gpus = timer_resources(cfg.backend)
    return {"num_gpus": gpus, "num_cpus": cpus, "max_restarts": max_restarts, "max_task_retries": 0}


async def evaluate_or_fail(timer: ray.actor.ActorHandle, task: Task, source: str,
                           build: ray.ObjectRef | Build, cfg: EvalConfig, *,
                           retries: int = 1, restart_timeout_s: float = 300.0) -> tuple[Measurement, int]:
    """Evaluate on `timer`, retrying up to `retries` times if the actor dies mid-call.

    Returns (measurement, retries_used); after the last death (or if Ray cannot bring the timer
    back) the candidate is recorded as failed (`rejected="timer_failed"`, failure reward), so it is
    accounted for exactly once. Ray does not re-run the call itself (`max_task_retries=0`): the
    retry happens here, where it is counted. `build` must be a successful build.
    """
    m, retried, last = await call_surviving_restarts(
        timer, lambda: timer.evaluate.remote(task, source, build), retries=retries,
        restart_timeout_s=restart_timeout_s)
    if m is not None:
        return m, retried
    failed = Measurement(task=task.id, backend=cfg.backend, mode=cfg.timing.mode, compiled=True,
                         rejected=TIMER_FAILED, detail=f"timer died during {retried + 1} attempt(s): {last}",
                         shared_device=cfg.shared_device)
    failed.reward = measurement_reward(failed, cfg.reward)
    return failed, retried
