"""The generator actor on a local CPU Ray cluster, with a real (tiny, random) model and adapters.

What must hold: completions carry token ids, behaviour logprobs and the adapter version that made
them; versioned adapters change samples and are evicted LRU beyond max_loaded_adapters; a version
the generator lacks is a clear, catchable error; and when the actor is killed mid-generation the
request is retried once on the restarted actor, which gets its adapter back from disk, and given
up (None) once Ray has no restarts left. Actors are killed for real with `ray.kill`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from tiny_model import PROMPTS, save_tiny_llama, save_tiny_lora  # noqa: E402

from rl_kernels.actors.generator import (  # noqa: E402
    AdapterNotLoadedError,
    GeneratorActor,
    generate_or_fail,
    generator_options,
)
from rl_kernels.config import ClusterConfig, PolicyConfig  # noqa: E402
from rl_kernels.policy import SamplingParams, adapter_name  # noqa: E402
from rl_kernels.policy.factory import sampling_params  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def adapters(model_dir: Path) -> dict[int, str]:
    """Versions 1..3, three different adapters, laid out like the learner writes them."""
    root = model_dir.parent / "adapters"
    return {v: str(save_tiny_lora(model_dir, root / adapter_name(v), seed=v)) for v in (1, 2, 3)}


@pytest.fixture(scope="module")
def cfg(model_dir: Path) -> PolicyConfig:
    return PolicyConfig(model=str(model_dir), group_size=4, max_new_tokens=8, batch_size=8)


def _start(cfg: PolicyConfig, max_restarts: int) -> Any:
    options = generator_options(ClusterConfig(generator_max_restarts=max_restarts), cfg)
    generator = GeneratorActor.options(**options).remote(cfg, 2)  # max_staleness 0 + 2
    ray.get(generator.ready.remote())
    return generator


@pytest.fixture(scope="module")
def generator(ray_cluster: Any, cfg: PolicyConfig) -> Any:
    """One generator for the tests that do not kill it; each loads the adapters it needs."""
    generator = _start(cfg, max_restarts=0)
    yield generator
    ray.kill(generator, no_restart=True)


def _flat(groups: list[list[Any]]) -> list[Any]:
    return [c for g in groups for c in g]


def test_generates_version_stamped_groups_and_counts_them(generator: Any, cfg: PolicyConfig) -> None:
    assert ray.get(generator.ready.remote()) == {
        "model": cfg.model, "device": "cpu", "loaded_versions": ray.get(generator.loaded_versions.remote())}
    before = ray.get(generator.stats.remote())
    params = sampling_params(cfg, seed=0)
    groups = ray.get(generator.generate.remote(PROMPTS, params, 0))
    assert [len(g) for g in groups] == [cfg.group_size] * len(PROMPTS)
    for group in groups:
        assert len({tuple(c.prompt_token_ids) for c in group}) == 1
        for c in group:
            assert 1 <= len(c.token_ids) == len(c.logprobs) <= cfg.max_new_tokens
            assert all(lp <= 0.0 for lp in c.logprobs) and c.adapter_version == 0
    assert groups[0][0].prompt_token_ids != groups[1][0].prompt_token_ids
    assert ray.get(generator.generate.remote(PROMPTS, params, 0)) == groups  # seeded: reproducible

    after = ray.get(generator.stats.remote())
    tokens = 2 * sum(len(c.token_ids) for c in _flat(groups))
    delta = {k: after[k] - before[k] for k in ("generate_calls", "prompts", "completions", "generated_tokens")}
    assert delta == {"generate_calls": 2, "prompts": 2 * len(PROMPTS),
                     "completions": 2 * len(PROMPTS) * cfg.group_size, "generated_tokens": tokens}
    assert after["busy_s"] > before["busy_s"] and 0.0 < after["busy_fraction"] <= 1.0
    assert after["tokens_per_s"] > 0 and after["in_flight"] is None
    assert after["restarted"] is False and after["pid"] == before["pid"]


def test_adapter_version_changes_samples(generator: Any, cfg: PolicyConfig, adapters: dict[int, str]) -> None:
    assert 1 in ray.get(generator.load_adapter.remote(1, adapters[1]))
    params = sampling_params(cfg, seed=3)
    base = _flat(ray.get(generator.generate.remote(PROMPTS, params, 0)))
    tuned = _flat(ray.get(generator.generate.remote(PROMPTS, params, 1)))
    assert {c.adapter_version for c in tuned} == {1}
    assert [c.logprobs for c in base] != [c.logprobs for c in tuned]


def test_eviction_and_missing_versions(generator: Any, cfg: PolicyConfig, adapters: dict[int, str]) -> None:
    params = SamplingParams(max_new_tokens=2, n=2, seed=0)
    ray.get(generator.load_adapter.remote(1, adapters[1]))
    assert ray.get(generator.load_adapter.remote(2, adapters[2])) == [0, 1, 2]
    ray.get(generator.generate.remote(PROMPTS, params, 1))  # v1 is now the most recently used
    assert ray.get(generator.load_adapter.remote(3, adapters[3])) == [0, 1, 3]  # v2 evicted
    assert ray.get(generator.loaded_versions.remote()) == [0, 1, 3]

    with pytest.raises(AdapterNotLoadedError, match=r"version 2 \(policy-v2\).*loaded: \[0, 1, 3\]") as err:
        ray.get(generator.generate.remote(PROMPTS, params, 2))
    assert (err.value.version, err.value.loaded) == (2, [0, 1, 3])
    with pytest.raises(AdapterNotLoadedError, match="policy-v7"):
        ray.get(generator.generate.remote(PROMPTS, params, 7))

    # generate_or_fail loads a missing version from its directory (no retry spent), not without one.
    with pytest.raises(AdapterNotLoadedError):
        asyncio.run(generate_or_fail(generator, PROMPTS, params, 2))
    groups, retries_used = asyncio.run(generate_or_fail(generator, PROMPTS, params, 2, adapter_path=adapters[2]))
    assert retries_used == 0 and {c.adapter_version for c in _flat(groups)} == {2}
    assert ray.get(generator.loaded_versions.remote()) == [0, 2, 3]  # v1 was the least recently used


def test_killed_mid_generation_retried_once_with_the_adapter_reloaded(
        ray_cluster: Any, cfg: PolicyConfig, adapters: dict[int, str], caplog: pytest.LogCaptureFixture) -> None:
    generator = _start(cfg, max_restarts=1)
    try:
        ray.get(generator.load_adapter.remote(1, adapters[1]))
        probe = SamplingParams(max_new_tokens=6, n=2, seed=5)
        reference = ray.get(generator.generate.remote(PROMPTS, probe, 1))
        # ~2 s of generation on one core: long enough that the kill surely lands mid-call.
        long = SamplingParams(max_new_tokens=100, n=16, seed=1)

        async def kill_mid_generation() -> tuple[Any, int]:
            pending = asyncio.ensure_future(
                generate_or_fail(generator, PROMPTS * 8, long, 1, adapter_path=adapters[1], restart_timeout_s=60))
            first = await _wait_in_flight(generator)
            ray.kill(generator, no_restart=False)
            result = await pending
            return result, first

        t0 = time.monotonic()
        (groups, retries_used), first_pid = asyncio.run(kill_mid_generation())
        assert retries_used == 1 and groups is not None
        # The death is said when it happens, although the retry then succeeds.
        lost = [r.getMessage() for r in caplog.records if "lost its call" in r.getMessage()]
        assert len(lost) == 1 and lost[0].startswith("GeneratorActor ") and "attempt 1 of 2" in lost[0]
        assert len(groups) == 16 and {c.adapter_version for c in _flat(groups)} == {1}
        stats = ray.get(generator.stats.remote())
        assert stats["restarted"] and stats["pid"] != first_pid
        # The restart came back with the base model only; v1 was reloaded for the retry, and only v1.
        assert stats["loaded_versions"] == [0, 1] and stats["adapter_loads"] == 1
        assert stats["generate_calls"] == 1  # counters are per process: the retry only
        assert ray.get(generator.generate.remote(PROMPTS, probe, 1)) == reference  # same weights
        assert time.monotonic() - t0 < 30

        # Its one restart is spent: the next death gives the request up instead of retrying it.
        async def kill_for_good() -> tuple[Any, int]:
            pending = asyncio.ensure_future(generate_or_fail(generator, PROMPTS * 8, long, 1, restart_timeout_s=60))
            await _wait_in_flight(generator)
            ray.kill(generator, no_restart=False)
            return await pending

        assert asyncio.run(kill_for_good()) == (None, 0)
    finally:
        ray.kill(generator, no_restart=True)


async def _wait_in_flight(generator: Any) -> int:
    """Poll until a generation runs; returns the actor's pid."""
    while True:
        stats = await generator.stats.remote()
        if stats["in_flight"] is not None:
            return stats["pid"]
        await asyncio.sleep(0.05)


def test_generator_options() -> None:
    cpu = PolicyConfig()
    assert generator_options(ClusterConfig(generator_max_restarts=2), cpu) == {
        "num_gpus": 0.0, "num_cpus": 1, "max_restarts": 2, "max_task_retries": 0, "max_concurrency": 1}
    assert generator_options(ClusterConfig(generator_slots=8), cpu)["max_concurrency"] == 8   # vLLM batches them
    assert generator_options(ClusterConfig(generator_num_gpus=1), PolicyConfig(device="cuda"))["num_gpus"] == 1
    with pytest.raises(ValueError, match="generator_num_gpus"):
        generator_options(ClusterConfig(), PolicyConfig(device="cuda"))
    with pytest.raises(ValueError, match="generator_num_gpus"):
        generator_options(ClusterConfig(generator_num_gpus=0.5), cpu)
