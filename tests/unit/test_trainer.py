"""The GRPO trainer on a real DeepSpeed engine (CPU accelerator, world of one) with a tiny Llama and
PEFT LoRA, and the adapter files it publishes.

The headline test is a toy task with a verifiable reward that needs no compiler (the
fraction of sampled words that are "kernel"). Sampling (HFPolicy), the loss, the engine step,
publishing the adapter and loading it back into the sampler all take part, and the mean reward
must climb from near 0 to well above 0.5 in a bounded number of steps.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny_model import PROMPTS, save_tiny_llama

from rl_kernels.learner.engine import lr_factor
from rl_kernels.learner.publish import adapter_dir, prune_adapters, publish_adapter, published_versions
from rl_kernels.learner.checkpoints import checkpoint_steps, rotate_checkpoints
from rl_kernels.learner.trainer import GrpoTrainer
from rl_kernels.config import GrpoConfig, LearnerConfig
from rl_kernels.host_share import HostShare, SharedUse
from rl_kernels.policy import SamplingParams
from rl_kernels.policy.hf import HFPolicy
from rl_kernels.trajectories import Group, Trajectory

TOY_STEPS = 14
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


LR = 3e-3


def _trainer(model_dir: Path, **learner: object) -> GrpoTrainer:
    cfg = LearnerConfig(**{"lr": LR, "micro_batch_size": 16, **learner})
    return GrpoTrainer(str(model_dir), cfg, GrpoConfig(), temperature=1.0, total_steps=TOY_STEPS)


def _toy_groups(policy: HFPolicy, version: int, seed: int) -> list[Group]:
    """Four groups of 8 completions; reward = fraction of the sampled words that are "kernel"."""
    target = policy.tokenizer.convert_tokens_to_ids("kernel")
    out = policy.generate(PROMPTS * 2, SamplingParams(max_new_tokens=NEW_TOKENS, n=8, seed=seed), version)
    return [Group(group_id=f"s{seed}-{k}", task_id="toy", policy_version=version,
                  prompt_token_ids=list(comps[0].prompt_token_ids),
                  trajectories=[Trajectory(index=i, completion=c.text, source=None,
                                           reward=sum(t == target for t in c.token_ids) / NEW_TOKENS,
                                           token_ids=list(c.token_ids), logprobs=list(c.logprobs),
                                           truncated=False)
                                for i, c in enumerate(comps)])
            for k, comps in enumerate(out)]


def _mean_reward(groups: list[Group]) -> float:
    return statistics.fmean(t.reward for g in groups for t in g.trajectories)


def test_learns_a_verifiable_reward(model_dir: Path, tmp_path: Path) -> None:
    policy = HFPolicy(model_dir, max_loaded_adapters=2)
    trainer = _trainer(model_dir)
    rewards, version = [], 0
    for step in range(TOY_STEPS):
        groups = _toy_groups(policy, version, seed=step)
        rewards.append(_mean_reward(groups))
        stats = trainer.train_step(groups, version)
        if step == 0:
            # the learner's recomputed logprobs are the sampler's: same tokens, same positions
            assert stats["learner/mismatch_kl"] < 1e-6
            assert stats["learner/is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
            assert stats["learner/clip_fraction"] == 0.0   # one epoch: the ratio is exactly 1
        assert stats["learner/tokens"] > 0 and stats["learner/grad_norm"] > 0
        version += 1
        policy.load_adapter(version, publish_adapter(trainer.save_adapter, tmp_path, version))
    first, last = statistics.fmean(rewards[:3]), statistics.fmean(rewards[-3:])
    assert first < 0.2 and last > 0.5 and last > first + 0.4, rewards


def test_zero_stages_take_the_same_step(model_dir: Path, tmp_path: Path) -> None:
    policy = HFPolicy(model_dir)
    groups = _toy_groups(policy, 0, seed=123)
    weights = {}
    for stage in (0, 1, 2, 3):
        torch.manual_seed(0)
        trainer = _trainer(model_dir, zero_stage=stage, micro_batch_size=5)   # several micro-batches
        stats = trainer.train_step(groups, 0)
        assert stats["learner/grad_norm"] == pytest.approx(stats["learner/grad_norm"])  # not NaN
        path = publish_adapter(trainer.save_adapter, tmp_path / f"z{stage}", 1)
        weights[stage] = load_file(path / "adapter_model.safetensors")
    # The stages reduce gradients in different orders (fp32), and Adam's first step
    # g / (|g| + eps) turns an absolute rounding error of a near-zero gradient into a visible change
    # of that element's step.  Every step is at most lr in size, so a wrong step differs by O(lr):
    # each element must agree within 1e-3 * lr, and all but a few within fp32 rounding.
    for stage in (1, 2, 3):
        assert weights[stage].keys() == weights[0].keys()
        for key, value in weights[0].items():
            torch.testing.assert_close(weights[stage][key], value, rtol=1e-5, atol=1e-3 * LR)
            off = (weights[stage][key] - value).abs() > 1e-7 + 1e-5 * value.abs()
            assert off.float().mean().item() < 0.01, f"stage {stage}, {key}: {int(off.sum())} elements off"


def test_checkpoint_restores_weights_optimizer_and_rng(model_dir: Path, tmp_path: Path) -> None:
    policy = HFPolicy(model_dir)
    batch1, batch2 = _toy_groups(policy, 0, seed=1), _toy_groups(policy, 0, seed=2)
    trainer = _trainer(model_dir, lora={"dropout": 0.1})   # dropout: the rng state matters too
    trainer.train_step(batch1, 0)
    trainer.save_checkpoint(tmp_path / "ckpt", 1, {"note": "after one step"})
    trainer.train_step(batch2, 1)
    expected = load_file(publish_adapter(trainer.save_adapter, tmp_path / "a", 2) / "adapter_model.safetensors")
    state = trainer.load_checkpoint(tmp_path / "ckpt", 1)
    assert state["note"] == "after one step" and trainer.optimizer_steps == 1
    trainer.train_step(batch2, 1)
    again = load_file(publish_adapter(trainer.save_adapter, tmp_path / "b", 2) / "adapter_model.safetensors")
    for key, value in expected.items():
        torch.testing.assert_close(again[key], value)
    for step in (2, 3, 4):
        trainer.save_checkpoint(tmp_path / "ckpt", step, {})
    assert rotate_checkpoints(tmp_path / "ckpt", keep=2) == [1, 2]
    assert checkpoint_steps(tmp_path / "ckpt") == [3, 4]


def test_kl_to_the_base_needs_no_second_model(model_dir: Path) -> None:
    policy = HFPolicy(model_dir)
    groups = _toy_groups(policy, 0, seed=5)
    trainer = GrpoTrainer(str(model_dir), LearnerConfig(lr=1e-2, micro_batch_size=32),
                          GrpoConfig(kl_coef=0.1), temperature=1.0)
    first = trainer.train_step(groups, 0)
    assert first["learner/kl"] == pytest.approx(0.0, abs=1e-9)   # zero-initialised LoRA: the base itself
    second = trainer.train_step(groups, 1)
    assert second["learner/kl"] > 0


def test_lr_schedule() -> None:
    cfg = LearnerConfig(lr_warmup_steps=2, lr_schedule="cosine", lr_min_ratio=0.1)
    assert [lr_factor(s, cfg, 10) for s in (0, 1)] == [0.5, 1.0]
    assert lr_factor(2, cfg, 10) == pytest.approx(1.0)
    assert lr_factor(6, cfg, 10) == pytest.approx(0.55)
    assert lr_factor(10, cfg, 10) == pytest.approx(0.1) == lr_factor(50, cfg, 10)
    linear = LearnerConfig(lr_schedule="linear", lr_min_ratio=0.0, lr_decay_steps=4)
    assert [lr_factor(s, linear, None) for s in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert lr_factor(3, LearnerConfig(), 10) == 1.0


def test_unknown_target_modules_are_named(model_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"\['wq'\] match no module"):
        _trainer(model_dir, lora={"target_modules": ["q_proj", "wq"]})


def test_publishing_is_atomic_and_prunable(tmp_path: Path) -> None:
    def save(text: str):
        def write(d: Path) -> None:
            d.mkdir()
            (d / "adapter_config.json").write_text(text)
        return write

    publish_adapter(save("one"), tmp_path, 1)
    publish_adapter(save("two"), tmp_path, 2)
    publish_adapter(save("two again"), tmp_path, 2)   # re-published after a resume: swapped in whole
    assert (adapter_dir(tmp_path, 2) / "adapter_config.json").read_text() == "two again"
    assert published_versions(tmp_path) == [1, 2]
    assert [p.name for p in (tmp_path / "adapters").iterdir() if p.name.startswith(".")] == []
    with pytest.raises(RuntimeError, match="no adapter_config.json"):
        publish_adapter(lambda d: d.mkdir(), tmp_path, 3)
    assert published_versions(tmp_path) == [1, 2]
    assert prune_adapters(tmp_path, keep={2}) == [1]
    assert published_versions(tmp_path) == [2]


def test_a_batch_without_signal_takes_no_step(model_dir: Path, tmp_path: Path) -> None:
    policy = HFPolicy(model_dir)
    groups = _toy_groups(policy, 0, seed=9)
    for g in groups:
        for t in g.trajectories:
            t.reward = 1.0          # every group zero-variance: all dropped
    trainer = _trainer(model_dir)
    before = load_file(publish_adapter(trainer.save_adapter, tmp_path, 1) / "adapter_model.safetensors")
    stats = trainer.train_step(groups, 0)
    assert (stats["learner/skipped"], stats["learner/tokens"], stats["learner/dropped_groups"]) == (1.0, 0, 4)
    assert trainer.optimizer_steps == 0
    after = load_file(publish_adapter(trainer.save_adapter, tmp_path, 2) / "adapter_model.safetensors")
    for key, value in before.items():
        assert torch.equal(after[key], value)


def test_training_yields_to_a_timer_between_micro_batches(model_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With a host share the step waits while a timer holds the host and offers it before every
    micro-batch of every epoch."""
    groups = _toy_groups(HFPolicy(model_dir), 0, seed=5)   # 4 groups x 8 = 32 completions
    offered = []
    real_between = SharedUse.between
    monkeypatch.setattr(SharedUse, "between", lambda self: (offered.append(1), real_between(self)))
    share = HostShare(tmp_path / "host.lock")
    trainer = GrpoTrainer(str(model_dir), LearnerConfig(lr=LR, micro_batch_size=8, epochs_per_batch=2),
                          GrpoConfig(), temperature=1.0, total_steps=TOY_STEPS, host=share)
    stats: list[dict[str, float]] = []
    with share.exclusive():
        thread = threading.Thread(target=lambda: stats.append(trainer.train_step(groups, 0)))
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and not stats, "training ran while a timer held the host"
    thread.join(120)
    assert stats and trainer.optimizer_steps == 2
    assert len(offered) == 2 * 4   # 2 epochs x 4 micro-batches of 8
