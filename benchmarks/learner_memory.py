"""Peak memory and seconds of the learner's optimizer steps on the embedded default's own sequences.

    python benchmarks/learner_memory.py --config configs/local.yaml --steps 2 [--out mem.json] [overrides]
    python benchmarks/learner_memory.py sft.full_finetune=false learner.gradient_checkpointing=true

Builds stage 1's examples of the configured `sft.tasks` from the packaged solution ladder (the
prompt with `prompts.num_exemplars` exemplars, the answer cut to `sft.max_answer_tokens`; no
evaluator: the measured note says 1.00x, which changes no length that matters) and takes `--steps`
optimizer steps of `sft.batch_size` examples with the warm start's trainer, as stage 1 does:
`sft.full_finetune` trains every weight, `false` a LoRA adapter (`learner.lora`), which is also
the shape of a stage-3 learner step (two sequences of ~700 prompt and ~1000 completion tokens per
micro-batch). One configuration per process, so the peak resident set (VmHWM) is this
configuration's: it prints and writes the peak after the model and engine are built and after the
steps, and each step's seconds and loss. Run it twice to compare a setting; on a shared host the
seconds move with the other load, the memory does not.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import Config, load_config  # noqa: E402
from rl_kernels.prompts.builder import Exemplar  # noqa: E402
from rl_kernels.sft.examples import SftExample, make_example, measured_note  # noqa: E402
from rl_kernels.sft.sources import read_source  # noqa: E402


def peak_rss_gb() -> float:
    """This process's peak resident set so far (VmHWM), in GB (1e9 bytes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    raise RuntimeError("no VmHWM in /proc/self/status")


def ladder_examples(cfg: Config) -> list[SftExample]:
    """Stage 1's examples of `cfg.sft.tasks` as `learner/warm_start.py` builds them, without verifying."""
    items = [it for it in read_source("builtin", None, backend=cfg.eval.backend).items
             if cfg.sft.tasks is None or it.task.id in cfg.sft.tasks]
    rng = random.Random(cfg.sft.seed)
    out = []
    for it in items:
        others = [Exemplar(o.source, 1.0) for o in items if o.task.id == it.task.id and o is not it]
        exemplars = rng.sample(others, min(len(others), cfg.prompts.num_exemplars))
        out.append(make_example(it.task, cfg.eval.backend, it.source, it.analysis,
                                measured_note(1.0, "eager", "cpu"), exemplars, cfg.prompts.mode))
    return out


def measure(cfg: Config, steps: int) -> dict[str, Any]:
    """Build the warm start's trainer and take `steps` optimizer steps; memory and time of each part."""
    from transformers import AutoTokenizer

    from rl_kernels.learner.sft import SftTrainer, encode_example
    from rl_kernels.policy.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.policy.model))
    encoded = [encode_example(tokenizer, ex, cfg.sft.max_answer_tokens) for ex in ladder_examples(cfg)]
    t0 = time.monotonic()
    trainer = SftTrainer(cfg.policy.model, cfg.learner, total_steps=steps, lr=cfg.sft.lr, full=cfg.sft.full_finetune)
    built = {"build_s": time.monotonic() - t0, "peak_rss_after_build_gb": peak_rss_gb(),
             "trainable_params": trainer.pe.trainable_params}
    rng = random.Random(cfg.sft.seed)
    order = rng.sample(encoded, len(encoded))
    size = cfg.sft.batch_size
    step_s, losses = [], []
    for k in range(steps):
        batch = [order[(k * size + j) % len(order)] for j in range(size)]
        stats = trainer.train_step(batch)
        step_s.append(round(stats["sft/step_s"], 1))
        losses.append(round(stats["sft/loss"], 4))
        print(f"step {k + 1}/{steps}: {stats['sft/step_s']:.1f} s, loss {stats['sft/loss']:.4f}, "
              f"peak rss {peak_rss_gb():.2f} GB", flush=True)
    return {**built, "examples": len(encoded),
            "prompt_tokens": sorted(len(e.prompt_ids) for e in encoded),
            "answer_tokens": sorted(len(e.answer_ids) for e in encoded),
            "step_s": step_s, "losses": losses, "peak_rss_gb": peak_rss_gb()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides, as the CLI takes them")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    result = {"config": args.config, "overrides": args.overrides, "full_finetune": cfg.sft.full_finetune,
              "gradient_checkpointing": cfg.learner.gradient_checkpointing,
              "micro_batch_size": cfg.learner.micro_batch_size, "batch_size": cfg.sft.batch_size,
              **measure(cfg, args.steps)}
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
