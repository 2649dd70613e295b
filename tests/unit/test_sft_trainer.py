"""The supervised warm start on a real DeepSpeed engine (CPU, world of one) with a tiny Llama and
PEFT LoRA: the loss on its data falls, the policy then samples the answer it was taught, and the
saved adapter, merged into the base weights, is a later run's starting point for both the
generators (version 0) and the learner (a fresh LoRA on top)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_model import PROMPTS, save_tiny_llama
from transformers import AutoTokenizer

from rl_kernels.learner.batch import Sample, micro_batches
from rl_kernels.learner.engine import build_policy_engine, token_logprobs
from rl_kernels.learner.sft import SftTrainer, encode_example
from rl_kernels.config import LearnerConfig
from rl_kernels.policy import SamplingParams
from rl_kernels.policy.delivery import DeliveryCheckedPolicy
from rl_kernels.policy.hf import HFPolicy
from rl_kernels.sft.examples import SftExample
from rl_kernels.tasks import get_task

ANSWER = "use shared memory tiles and warps"
STEPS = 30


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny"))


def test_sft_teaches_the_answer_and_its_adapter_carries_over(model_dir: Path, tmp_path: Path) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    task = get_task("hgemm/fp32/64_64_64")
    examples = [encode_example(tok, SftExample(list(p), ANSWER, task), max_answer_tokens=64) for p in PROMPTS]
    assert examples[0].answer_ids[-1] == tok.eos_token_id            # it learns to stop
    assert tok.decode(examples[0].answer_ids[:-1]) == ANSWER
    cfg = LearnerConfig(lr=3e-2, micro_batch_size=2, zero_stage=0)
    trainer = SftTrainer(str(model_dir), cfg, total_steps=STEPS)
    before = trainer.token_loss(examples)
    losses = [trainer.train_step(examples)["sft/loss"] for _ in range(STEPS)]
    after = trainer.token_loss(examples)
    assert after < 0.1 * before and losses[-1] < losses[0], (before, after, losses[::5])

    adapter = tmp_path / "adapter"
    trainer.save_adapter(adapter)
    policy = DeliveryCheckedPolicy(HFPolicy(model_dir), tolerance=0.01, min_shift=1e-3)   # self-training publishes it
    policy.load_adapter(1, adapter)
    out = policy.generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0.05, seed=0), 1)
    assert policy.checks[0].conclusive and policy.checks[0].delivered
    assert all(c[0].text.strip() == ANSWER for c in out), [c[0].text for c in out]
    # policy.init_adapter: merged into the base weights, the warm start is a GRPO run's version 0
    warm = HFPolicy(model_dir, init_adapter=adapter)
    out = warm.generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0.05, seed=0), 0)
    assert all(c[0].text.strip() == ANSWER for c in out), [c[0].text for c in out]

    again = build_policy_engine(str(model_dir), cfg, lambda s: 1.0, init_adapter=adapter)
    samples = [Sample(e.prompt_ids, e.answer_ids, [0.0] * len(e.answer_ids), 1.0) for e in examples]
    mb = micro_batches(samples, 2, again.pad_id)[0]
    with torch.no_grad():
        reloaded = float(-(token_logprobs(again, mb, 1.0)[0] * mb.mask).sum() / mb.mask.sum())
    assert reloaded == pytest.approx(after, rel=1e-4) and again.trainable_params == trainer.pe.trainable_params
    with pytest.raises(FileNotFoundError, match="not a PEFT adapter directory"):
        build_policy_engine(str(model_dir), cfg, lambda s: 1.0, init_adapter=tmp_path)
