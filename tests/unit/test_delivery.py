"""Adapter delivery checks with a real learner (GrpoTrainer on DeepSpeed, tiny Llama + LoRA) and a real
sampler (HFPolicy): the learner's adapter passes, anything else served under its version fails loudly."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from tiny_model import PROMPTS, save_tiny_llama

from rl_kernels.config import GrpoConfig, LearnerConfig
from rl_kernels.learner.publish import publish_adapter
from rl_kernels.learner.trainer import GrpoTrainer
from rl_kernels.policy import SamplingParams
from rl_kernels.policy.delivery import (PROBE_FILE, AdapterDeliveryError, DeliveryCheckedPolicy, Probe, compare,
                                        read_probe, write_magnified_adapter)
from rl_kernels.policy.hf import HFPolicy
from rl_kernels.trajectories import Group, Trajectory

PARAMS = SamplingParams(max_new_tokens=6, n=4, seed=0)


def _publish(model_dir: Path, run: Path, lr: float, magnify_to: float = 0.0) -> Path:
    """The learner's version-1 adapter after one GRPO step at `lr`, with its probe."""
    trainer = GrpoTrainer(str(model_dir), LearnerConfig(lr=lr, micro_batch_size=8), GrpoConfig(), temperature=1.0,
                          probe_magnify_to=magnify_to)
    sampler = HFPolicy(model_dir)
    comps = sampler.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, n=8, seed=1), 0)[0]
    group = Group(group_id="g", task_id="toy", policy_version=0, prompt_token_ids=list(comps[0].prompt_token_ids),
                  trajectories=[Trajectory(index=i, completion=c.text, source=None, reward=float(i % 2),
                                           token_ids=list(c.token_ids), logprobs=list(c.logprobs), truncated=False)
                                for i, c in enumerate(comps)])
    trainer.train_step([group], 0)
    return publish_adapter(trainer.save_adapter, run, 1)


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny model and a version-1 adapter its learner published after one step."""
    model_dir = save_tiny_llama(tmp_path_factory.mktemp("tiny"))
    return model_dir, _publish(model_dir, tmp_path_factory.mktemp("run"), lr=0.05)


@pytest.fixture(scope="module")
def small(published: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A version-1 adapter after one step at lr 1e-5 (an effect far below any check's threshold), its
    probe magnified to 0.05 nats/token."""
    model_dir, _ = published
    return model_dir, _publish(model_dir, tmp_path_factory.mktemp("small"), lr=1e-5, magnify_to=0.05)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _scaled_b_copy(src: Path, dst: Path, factor: float) -> Path:
    """The adapter (and its probe) with every LoRA B times `factor`: 0 is an engine that drops the update."""
    _copy(src, dst)
    weights = load_file(dst / "adapter_model.safetensors")
    save_file({k: v * factor if "lora_B" in k else v for k, v in weights.items()}, dst / "adapter_model.safetensors")
    return dst


def test_the_learner_publishes_a_probe_and_its_adapter_passes(published: tuple[Path, Path]) -> None:
    model_dir, v1 = published
    probe = read_probe(v1)
    assert probe is not None and len(probe.token_ids) > 20
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.01, min_shift=1e-3)
    policy.load_adapter(1, v1)
    assert len(policy.generate(PROMPTS[:1], PARAMS, 1)[0]) == 4
    (check,) = policy.checks
    assert check.shift > 1e-3 and check.conclusive        # the adapter moved the probe's logprobs
    assert check.delivered and check.share == pytest.approx(1.0, abs=1e-4)   # same weights, same fp32 maths
    assert check.correlation == pytest.approx(1.0, abs=1e-4)
    assert policy.stats()["adapter_checks"] == 1
    policy.generate(PROMPTS[:1], PARAMS, 1)                # checked once per load, not per call
    assert policy.stats()["adapter_checks"] == 1


def test_weights_other_than_the_learners_fail_with_the_version(published: tuple[Path, Path], tmp_path: Path) -> None:
    model_dir, v1 = published
    zeroed = _scaled_b_copy(v1, tmp_path / "zeroed", 0)                # what an engine that drops the update serves
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.25, min_shift=1e-3)
    policy.load_adapter(2, zeroed)
    with pytest.raises(AdapterDeliveryError, match=r"policy-v2 from .*zeroed is not what the learner published.*"
                                                   r"reproduces 0\.00 of the learner's adapter effect.*serves the base"):
        policy.generate(PROMPTS[:1], PARAMS, 2)
    assert policy.stats()["adapter_check_failures"] == 1
    with pytest.raises(AdapterDeliveryError):              # still unchecked: never sampled from
        policy.generate(PROMPTS[:1], PARAMS, 2)
    assert policy.generate(PROMPTS[:1], PARAMS, 0)         # the base model itself needs no check


def test_a_wrong_scaling_is_a_partial_delivery(published: tuple[Path, Path], tmp_path: Path) -> None:
    """A wrong LoRA scaling (B at 0.3 of the learner's): the generator serves an adapter, not the learner's.
    The effect is not linear in B at this adapter's size (a mean shift near 1 nat/token)."""
    model_dir, v1 = published
    scaled = _scaled_b_copy(v1, tmp_path / "scaled", 0.3)
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.25, min_shift=1e-3)
    policy.load_adapter(3, scaled)
    with pytest.raises(AdapterDeliveryError, match=r"reproduces 0\.\d\d of the learner's adapter effect"):
        policy.generate(PROMPTS[:1], PARAMS, 3)
    assert 0.1 < policy.stats()["adapter_share_worst"] < 0.75
    assert policy.checks[-1].correlation > 0.5   # the right direction, the wrong size: the share tells them apart


def test_an_adapter_without_a_probe_is_served_and_counted_unchecked(published: tuple[Path, Path],
                                                                   tmp_path: Path) -> None:
    model_dir, v1 = published
    bare = _copy(v1, tmp_path / "bare")
    (bare / PROBE_FILE).unlink()
    broken = _copy(v1, tmp_path / "broken")
    (broken / PROBE_FILE).write_text(json.dumps({"token_ids": [1, 2], "adapter_logprobs": []}))
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.25, min_shift=1e-3)
    policy.load_adapter(1, bare)
    policy.generate(PROMPTS[:1], PARAMS, 1)
    assert policy.stats()["adapter_unchecked"] == 1 and policy.stats()["adapter_checks"] == 0
    policy.load_adapter(2, broken)
    with pytest.raises(AdapterDeliveryError, match="broken/probe.json is not a readable probe"):
        policy.generate(PROMPTS[:1], PARAMS, 2)


def test_an_effect_too_small_to_judge_is_served_and_counted(published: tuple[Path, Path]) -> None:
    model_dir, v1 = published
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.25, min_shift=10.0)
    policy.load_adapter(1, v1)
    policy.generate(PROMPTS[:1], PARAMS, 1)
    assert not policy.checks[0].conclusive and policy.stats()["adapter_inconclusive"] == 1


def test_a_generation_during_a_check_waits_for_its_verdict(published: tuple[Path, Path], tmp_path: Path) -> None:
    """Two first generations of a version that does not deliver: the one that arrives while the other
    checks must not sample; it waits and fails with it."""
    model_dir, v1 = published
    zeroed = _scaled_b_copy(v1, tmp_path / "zeroed", 0)
    scoring, release = threading.Event(), threading.Event()

    class SlowScoring(HFPolicy):   # holds the first check inside its scoring until released
        def score(self, token_ids: list[int], adapter_version: int) -> list[float]:
            scoring.set()
            release.wait(30)
            return super().score(token_ids, adapter_version)

    policy = DeliveryCheckedPolicy(SlowScoring(model_dir), tolerance=0.25, min_shift=1e-3)
    policy.load_adapter(2, zeroed)
    outcomes: list[str] = []

    def first_generation() -> None:
        try:
            policy.generate(PROMPTS[:1], PARAMS, 2)
            outcomes.append("sampled")
        except AdapterDeliveryError:
            outcomes.append("refused")

    threads = [threading.Thread(target=first_generation) for _ in range(2)]
    threads[0].start()
    assert scoring.wait(30)                # the first call is inside the check
    threads[1].start()
    time.sleep(0.5)
    assert outcomes == []                  # the second one waits instead of sampling an unchecked version
    release.set()
    for t in threads:
        t.join(60)
    assert outcomes == ["refused", "refused"] and policy.stats()["adapter_check_failures"] == 2


def test_a_generation_while_the_adapter_loads_is_checked(published: tuple[Path, Path]) -> None:
    """The generator actor loads adapters in their own concurrency group: a generation that arrives
    once the backend holds the version but before load_adapter has returned must still check it."""
    model_dir, v1 = published
    loaded, release = threading.Event(), threading.Event()

    class SlowLoad(HFPolicy):   # holds load_adapter after the backend has the version
        def load_adapter(self, version: int, path: Path) -> None:
            super().load_adapter(version, path)
            loaded.set()
            release.wait(30)

    policy = DeliveryCheckedPolicy(SlowLoad(model_dir), tolerance=0.25, min_shift=1e-3)
    loading = threading.Thread(target=policy.load_adapter, args=(1, v1))
    loading.start()
    assert loaded.wait(30)
    policy.generate(PROMPTS[:1], PARAMS, 1)
    assert policy.stats()["adapter_checks"] == 1     # checked, not sampled unchecked
    release.set()
    loading.join(30)


def test_an_effect_inside_the_engines_numerics_is_inconclusive() -> None:
    """A bf16 learner's first step moves the probe by rounding noise as large as the gap between two
    engines on the base: no engine can tell that adapter from the base, so the check must not judge."""
    probe = Probe(token_ids=list(range(5)), adapter_logprobs=[-1.05, -2.0, -0.95, -3.0],
                  base_logprobs=[-1.0, -2.05, -1.0, -2.95])            # effect: 0.05 nats/token of noise
    served_base = [-1.04, -2.01, -0.96, -2.99]                        # the engines differ by 0.04 on the base
    unrelated = compare(1, probe, served_base, served_base, 0.75, 0.02, noise_multiple=1.5)
    assert unrelated.shift == pytest.approx(0.05) and unrelated.base_gap == pytest.approx(0.04)
    assert not unrelated.conclusive and unrelated.delivered           # 0.05 < 1.5 x 0.04: served, inconclusive
    assert not compare(1, probe, served_base, served_base, 0.75, 0.02).delivered   # judged without it: a false alarm
    same_engine = compare(1, probe, probe.base_logprobs, probe.base_logprobs, 0.75, 0.02, noise_multiple=1.5)
    assert same_engine.base_gap == 0.0 and same_engine.conclusive and not same_engine.delivered


def test_the_generators_checks_become_run_metrics() -> None:
    from rl_kernels.cluster.driver import delivery_gauges

    nan = float("nan")
    stats = [{"adapter_checks": 3, "adapter_check_failures": 0, "adapter_inconclusive": 1, "adapter_unchecked": 0,
              "adapter_magnified": 2, "adapter_share_worst": 0.8, "adapter_base_gap_last": 0.04},
             {"adapter_checks": 2, "adapter_check_failures": 1, "adapter_inconclusive": 0, "adapter_unchecked": 1,
              "adapter_share_worst": 1.1, "adapter_base_gap_last": 0.05},
             {"generate_calls": 4, "adapter_share_worst": nan}]   # a simulated generator: no checks
    assert delivery_gauges(stats) == {"policy/delivery/checks": 5.0, "policy/delivery/check_failures": 1.0,
                                      "policy/delivery/inconclusive": 1.0, "policy/delivery/unchecked": 1.0,
                                      "policy/delivery/magnified": 2.0, "policy/delivery/share_worst": 0.8,
                                      "policy/delivery/base_gap": 0.05}


# ---- the magnified check: a small update is judged, not counted inconclusive ----------------------
def test_a_small_update_is_checked_through_a_magnified_copy(small: tuple[Path, Path]) -> None:
    model_dir, v1 = small
    probe = read_probe(v1)
    assert probe is not None and probe.magnified_logprobs is not None
    magnified = probe.magnified()
    assert probe.shift < 0.05 <= magnified.shift and probe.magnification >= 4   # the learner magnified it
    backend = HFPolicy(model_dir)
    policy = DeliveryCheckedPolicy(backend, tolerance=0.05, min_shift=0.0)   # judged magnified all the same
    policy.load_adapter(1, v1)
    policy.generate(PROMPTS[:1], PARAMS, 1)
    (check,) = policy.checks
    assert check.conclusive and check.delivered and check.magnification == probe.magnification
    assert check.share == pytest.approx(1.0, abs=1e-3) and check.shift == pytest.approx(magnified.shift)
    assert policy.stats()["adapter_magnified"] == 1 and policy.stats()["adapter_inconclusive"] == 0
    # the version serves the published adapter again, not the magnified copy
    served = backend.score(probe.token_ids, 1)
    assert max(abs(a - b) for a, b in zip(served, probe.adapter_logprobs)) < 1e-4
    assert backend._adapters[1] == v1


def test_a_small_update_the_generator_drops_fails_magnified(small: tuple[Path, Path], tmp_path: Path) -> None:
    """Served without its update (B zeroed, the learner's probe kept): unmagnified, the two are inside
    any threshold; magnified, the generator reproduces none of the learner's effect."""
    model_dir, v1 = small
    zeroed = _scaled_b_copy(v1, tmp_path / "zeroed", 0)
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.25, min_shift=1e-3)
    policy.load_adapter(1, zeroed)
    with pytest.raises(AdapterDeliveryError, match=r"reproduces 0\.00 of the learner's adapter effect "
                                                   r"\(\d\.\d+ nats/token with the adapter magnified \d+x"):
        policy.generate(PROMPTS[:1], PARAMS, 1)


def test_a_scaling_the_engine_gets_wrong_fails_magnified(small: tuple[Path, Path], tmp_path: Path) -> None:
    model_dir, v1 = small
    halved = _copy(v1, tmp_path / "halved")   # the engine reads half the learner's lora_alpha
    config = json.loads((halved / "adapter_config.json").read_text())
    (halved / "adapter_config.json").write_text(json.dumps({**config, "lora_alpha": config["lora_alpha"] / 2}))
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.25, min_shift=1e-3)
    policy.load_adapter(1, halved)
    with pytest.raises(AdapterDeliveryError, match=r"reproduces 0\.[3-6]\d of the learner's adapter effect"):
        policy.generate(PROMPTS[:1], PARAMS, 1)


def test_a_generator_left_serving_the_magnified_copy_stops(small: tuple[Path, Path]) -> None:
    model_dir, v1 = small

    class KeepsFirstReload(HFPolicy):   # ignores the load that should put the published files back
        def load_adapter(self, version: int, path: Path) -> None:
            if version in self._adapters and "magnified" in str(self._adapters[version]):
                return
            super().load_adapter(version, path)

    policy = DeliveryCheckedPolicy(KeepsFirstReload(model_dir), tolerance=0.25, min_shift=1e-3)
    policy.load_adapter(1, v1)
    with pytest.raises(AdapterDeliveryError, match=r"policy-v1: after its magnified check the generator does not "
                                                   r"serve .* again"):
        policy.generate(PROMPTS[:1], PARAMS, 1)


def test_the_magnified_copy_scales_alpha_and_links_the_tensors(small: tuple[Path, Path], tmp_path: Path) -> None:
    _, v1 = small
    source = _copy(v1, tmp_path / "source")
    config = json.loads((source / "adapter_config.json").read_text())
    (source / "adapter_config.json").write_text(json.dumps({**config, "alpha_pattern": {"q_proj": 4}}))
    out = write_magnified_adapter(source, 16.0, tmp_path / "x16")
    magnified = json.loads((out / "adapter_config.json").read_text())
    assert magnified["lora_alpha"] == config["lora_alpha"] * 16 and magnified["alpha_pattern"] == {"q_proj": 64}
    assert (out / "adapter_model.safetensors").resolve() == (source / "adapter_model.safetensors").resolve()
    assert not (out / PROBE_FILE).exists()
    (source / "adapter_config.json").write_text(json.dumps({"r": 8}))
    with pytest.raises(AdapterDeliveryError, match="has no lora_alpha"):
        write_magnified_adapter(source, 4.0, tmp_path / "bad")


def test_a_magnified_probe_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="magnified probe needs 2 logprobs"):
        Probe([1, 2, 3], [-1.0, -1.0], [-1.0, -1.0], magnification=4.0, magnified_logprobs=[-1.0])

