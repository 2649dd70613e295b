"""Generator actor: samples groups of completions with a versioned LoRA adapter (DESIGN.md "Data flow").

Thin on purpose: sampling, behaviour logprobs and adapter bookkeeping (LRU over the last
max_staleness + 2 versions) are the policy backend's (`rl_kernels.policy`), tested without Ray.
What this actor adds is a process that holds the model, and the accounting of its work:

- `generate` runs in the default group, `cluster.generator_slots` calls at once (hf samples one
  batch at a time and serialises them; vLLM batches them into the same engine steps); busy time
  counts the time with at least one call running. `load_adapter` has its own group, so an
  announced version loads while a generation runs (HFPolicy injects it inactive and never evicts
  the version in use, vLLM loads it between engine steps), without waiting for the generations in
  flight or the queued ones.
- `ready`, `loaded_versions` and `stats` run in a "control" group and never take the backend's
  lock: they answer from a snapshot of the loaded versions (only `load_adapter` changes that
  set), so a liveness ping does not wait for a generation.
- If the actor dies, Ray restarts it (`max_restarts`) with the base model only: every adapter
  loaded into the old process is gone. `generate` on a version this process lacks raises
  `AdapterNotLoadedError`; `generate_or_fail` reloads the adapter from its path and generates
  again, and retries a call that died with the actor once, then gives the group up (None), which
  the driver records with the replay buffer's `fail_group(group_id, GENERATOR_FAILED)`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray

from rl_kernels.actors.restarts import call_surviving_restarts
from rl_kernels.config import ClusterConfig, PolicyConfig, SimulationConfig
from rl_kernels.host_share import HostShare
from rl_kernels.placement import generator_resources
from rl_kernels.policy import Completion, Messages, SamplingParams, adapter_name
from rl_kernels.policy.delivery import DeliveryCheckedPolicy

log = logging.getLogger(__name__)

GENERATOR_FAILED = "generator_failed"  # fail_group reason: the generator died twice on this group


class AdapterNotLoadedError(LookupError):
    """`generate` was asked for a version this generator does not hold: evicted (older than the
    last max_loaded_adapters loaded) or lost when Ray restarted the actor. Load it and retry."""

    def __init__(self, version: int, loaded: list[int]) -> None:
        super().__init__(version, loaded)  # the args rebuild it when Ray unpickles it in the caller
        self.version = version
        self.loaded = loaded

    def __str__(self) -> str:
        return (f"adapter version {self.version} ({adapter_name(self.version)}) is not loaded on this "
                f"generator (loaded: {self.loaded}); a restarted generator holds only the base model: "
                f"call load_adapter({self.version}, path) and retry")


@ray.remote(max_concurrency=1, concurrency_groups={"control": 1, "adapters": 1})
class GeneratorActor:
    """One policy replica. Create it with `generator_options(...)` and
    max_loaded_adapters = rollout.max_staleness + 2, and the host share (`eval.quiet_host`) when a timer
    measures on the cores it samples on; `simulate` (`cluster.simulate`) samples timed draws instead
    of a model (rl_kernels/simulation.py)."""

    def __init__(self, cfg: PolicyConfig, max_loaded_adapters: int, host: HostShare | None = None,
                 simulate: SimulationConfig | None = None) -> None:
        self.cfg = cfg
        if simulate is not None:
            from rl_kernels.simulation import SimulatedPolicy

            self.policy = SimulatedPolicy(simulate, max_loaded_adapters)
        else:
            from rl_kernels.policy.factory import make_policy   # torch and the model: only for real work

            self.policy = make_policy(cfg, max_loaded_adapters=max_loaded_adapters, host=host)
        self._loaded = self.policy.loaded_versions()
        self._books = threading.Lock()             # generate calls run in several threads
        self._in_flight: Counter[int] = Counter()  # adapter version -> calls sampling it now
        self._counts = {"generate_calls": 0, "prompts": 0, "completions": 0, "generated_tokens": 0,
                        "adapter_loads": 0}
        self._busy_s = 0.0                         # finished stretches with a call running
        self._busy_since = 0.0                     # start of the running stretch
        self._started = time.monotonic()

    @ray.method(concurrency_group="control")
    def ready(self) -> dict[str, Any]:
        """Resolves once the model is loaded (creation errors surface here), even mid-generation."""
        return {"model": self.cfg.model, "device": self.cfg.device, "loaded_versions": list(self._loaded)}

    def generate(self, prompts: list[Messages], params: SamplingParams,
                 adapter_version: int) -> list[list[Completion]]:
        """`params.n` completions per prompt, each stamped with `adapter_version`."""
        with self._books:
            if not self._in_flight:
                self._busy_since = time.monotonic()
            self._in_flight[adapter_version] += 1
        try:
            groups = self.policy.generate(prompts, params, adapter_version)
        except KeyError:  # the backend's "not loaded"; anything else (a failed delivery check, a bug)
            # propagates as is and stops the run
            loaded = self.policy.loaded_versions()
            if adapter_version in loaded:
                raise
            raise AdapterNotLoadedError(adapter_version, loaded) from None
        finally:
            with self._books:
                self._in_flight[adapter_version] -= 1
                if not self._in_flight[adapter_version]:
                    del self._in_flight[adapter_version]
                if not self._in_flight:
                    self._busy_s += time.monotonic() - self._busy_since
        with self._books:
            self._counts["generate_calls"] += 1
            self._counts["prompts"] += len(prompts)
            self._counts["completions"] += sum(len(g) for g in groups)
            self._counts["generated_tokens"] += sum(len(c.token_ids) for g in groups for c in g)
        return groups

    @ray.method(concurrency_group="adapters")
    def load_adapter(self, version: int, path: str) -> list[int]:
        """Load `path` (a PEFT adapter directory) as `policy-v{version}`; returns the versions now
        loaded. Idempotent, so the driver can announce a version again (e.g. after a restart)."""
        self.policy.load_adapter(version, Path(path))
        self._loaded = self.policy.loaded_versions()
        self._counts["adapter_loads"] += 1
        return list(self._loaded)

    @ray.method(concurrency_group="control")
    def loaded_versions(self) -> list[int]:
        """Versions `generate` accepts, ascending (0, the base model, always)."""
        return list(self._loaded)

    @ray.method(concurrency_group="control")
    def stats(self) -> dict[str, Any]:
        """Counters since this process started (they reset when Ray restarts the actor; `pid` and
        `restarted` tell a restarted generator from the original); `in_flight` is the newest version
        being sampled now, None when nothing is."""
        now = time.monotonic()
        alive = now - self._started
        with self._books:
            busy = self._busy_s + (now - self._busy_since if self._in_flight else 0.0)
            newest = max(self._in_flight) if self._in_flight else None
            counts = dict(self._counts)
        delivery = self.policy.stats() if isinstance(self.policy, DeliveryCheckedPolicy) else {}
        return {**counts, **delivery, "pid": os.getpid(),
                "restarted": ray.get_runtime_context().was_current_actor_reconstructed,
                "in_flight": newest, "loaded_versions": list(self._loaded), "busy_s": busy,
                "busy_fraction": busy / alive if alive > 0 else 0.0,
                "tokens_per_s": counts["generated_tokens"] / busy if busy > 0 else 0.0}


def generator_options(cluster_cfg: ClusterConfig, policy_cfg: PolicyConfig) -> dict[str, Any]:
    """Ray options for a generator. A cuda policy needs GPUs reserved, or Ray hides every device
    from the actor; a cpu one must not reserve GPUs nobody uses."""
    on_gpu = policy_cfg.device.startswith("cuda")
    if on_gpu != (cluster_cfg.generator_num_gpus > 0):
        raise ValueError(f"policy.device={policy_cfg.device} does not match "
                         f"cluster.generator_num_gpus={cluster_cfg.generator_num_gpus}")
    cpus, gpus = generator_resources(cluster_cfg)
    return {"num_gpus": gpus, "num_cpus": cpus, "max_restarts": cluster_cfg.generator_max_restarts,
            "max_task_retries": 0, "max_concurrency": cluster_cfg.generator_slots}


async def generate_or_fail(generator: ray.actor.ActorHandle, prompts: list[Messages],
                           params: SamplingParams, version: int, *, adapter_path: str | None = None,
                           retries: int = 1, restart_timeout_s: float = 300.0
                           ) -> tuple[list[list[Completion]] | None, int]:
    """Generate on `generator`, retrying up to `retries` times if the actor dies mid-call.

    Returns (groups, retries_used); groups is None when every attempt died (or Ray could not bring
    the generator back): the caller fails the group (`fail_group(..., GENERATOR_FAILED)`), so it is
    accounted for exactly once. `adapter_path` is the directory of `version`'s adapter: a generator
    that lacks the version (restarted, so it holds the base model only) loads it from there first.
    Without it, AdapterNotLoadedError propagates. Errors raised by generation itself are bugs and
    propagate; only actor death is retried (Ray does not re-run the call: `max_task_retries=0`).
    """
    groups, retried, last = await call_surviving_restarts(
        generator, lambda: _generate_reloading(generator, prompts, params, version, adapter_path),
        retries=retries, restart_timeout_s=restart_timeout_s)
    if groups is None:
        log.warning("generator died during %d attempt(s) on a v%d request; giving it up: %s",
                    retried + 1, version, last)
    return groups, retried


async def _generate_reloading(generator: ray.actor.ActorHandle, prompts: list[Messages],
                              params: SamplingParams, version: int,
                              adapter_path: str | None) -> list[list[Completion]]:
    """One attempt; if the generator lacks `version`, load it from `adapter_path` and ask again."""
    try:
        return await generator.generate.remote(prompts, params, version)
    except AdapterNotLoadedError:
        if adapter_path is None:
            raise
    await generator.load_adapter.remote(version, adapter_path)
    return await generator.generate.remote(prompts, params, version)
