"""Stage 1, the supervised warm start, as one job: read the configured sources, re-verify every
kernel with the evaluator, train a LoRA adapter (or, with `sft.full_finetune`, every weight) on
(prompt, answer) pairs, then sample the trained policy and evaluate what it writes.

Everything lands in `run_dir/sft/`: `adapter/` (a PEFT directory GRPO can start from) or `model/`
(a whole model directory, after full fine-tuning),
`metrics.jsonl` (one line per optimizer step), `samples.jsonl` (what the trained policy wrote, each
answer with its outcome) and `report.json` (what was read, kept and refused
with reasons, the loss curve, the held-out token loss before and after, the sampled completions'
parse / compile / correct rates).  Progress goes to `progress` line by line as it happens.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from rl_kernels.learner.sft import EncodedExample, SftTrainer, encode_example
from rl_kernels.config import Config, ConfigError
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.prompts.builder import Exemplar
from rl_kernels.prompts.parsing import parse_completion
from rl_kernels.sft.examples import SftExample, make_example, measured_note
from rl_kernels.sft.sources import Loaded, Skipped, read_source
from rl_kernels.sft.verify import VerifiedKernel, Verification, verify
from rl_kernels.tasks.split import task_split

SFT_DIR = "sft"
REPORT = "report.json"   # written last: its presence means the stage finished
SAMPLES = "samples.jsonl"  # the trained policy's sampled answers with their outcomes, for reading


def output_name(cfg: Config) -> str:
    """What the warm start writes under run_dir/sft/: a LoRA adapter, or a whole model."""
    return "model" if cfg.sft.full_finetune else "adapter"


def _read(cfg: Config, progress: Callable[[str], None]) -> Loaded:
    if not cfg.sft.sources:
        raise ConfigError("sft.sources is empty: name at least one source (kind + path) to warm-start from")
    loaded = Loaded()
    split = task_split(cfg.split)
    selected = set(cfg.sft.tasks) if cfg.sft.tasks is not None else None
    if selected is not None:
        split.refuse_heldout(selected, "sft.tasks")
    seen: set[str] = set()
    for src in cfg.sft.sources:
        got = read_source(src.kind, src.path, backend=cfg.eval.backend, accumulator=src.accumulator)
        seen.update(it.task.id for it in got.items)
        if selected is not None:
            got.skipped += [Skipped(it.origin, "not_selected", f"{it.task.id} is not in sft.tasks")
                            for it in got.items if it.task.id not in selected]
            got.items = [it for it in got.items if it.task.id in selected]
        train, held = [], []
        for it in got.items:
            (held if split.is_heldout(it.task.id) else train).append(it)
        # The built-in ladder covers every built-in task by design: its held-out rungs are dropped.
        if held and not (src.drop_heldout or src.kind == "builtin"):
            split.refuse_heldout([it.task.id for it in held],
                                 f"sft source {src.kind} {src.path} (set drop_heldout: true on it to skip them)")
        got.items = train
        got.skipped += [Skipped(it.origin, "heldout_task", f"{it.task.id} is held out of training") for it in held]
        progress(f"read {src.kind} {src.path or '(packaged ladder)'}: {len(got.items)} kernels, {len(got.skipped)} skipped "
                 f"{dict(Counter(s.reason for s in got.skipped))}")
        loaded.extend(got)
    missing = sorted(selected - seen) if selected is not None else []
    if missing:
        raise ConfigError(f"sft.tasks names {missing}, which no sft source has kernels for "
                          f"(the sources cover {len(seen)} tasks, e.g. {sorted(seen)[:5]})")
    return loaded


def _examples(cfg: Config, kept: list[VerifiedKernel]) -> list[SftExample]:
    """One example per verified kernel; a contrastive prompt shows other verified kernels of its task."""
    by_task: dict[str, list[VerifiedKernel]] = {}
    for k in kept:
        by_task.setdefault(k.item.task.id, []).append(k)
    rng = random.Random(cfg.sft.seed)
    out = []
    for k in kept:
        m = k.measurement
        others = [Exemplar(o.item.source, o.measurement.speedup or 0.0) for o in by_task[k.item.task.id] if o is not k]
        exemplars = rng.sample(others, min(len(others), cfg.prompts.num_exemplars))
        note = measured_note(m.speedup or 0.0, m.baseline, m.device)
        out.append(make_example(k.item.task, cfg.eval.backend, k.item.source, k.item.analysis, note, exemplars,
                                cfg.prompts.mode))
    return out


def _split(cfg: Config, examples: list[SftExample]) -> tuple[list[SftExample], list[SftExample]]:
    """(train, held out): a seeded draw of `heldout_fraction`, never all of them."""
    order = list(examples)
    random.Random(cfg.sft.seed).shuffle(order)
    n_held = min(len(order) - 1, math.ceil(cfg.sft.heldout_fraction * len(order))) if cfg.sft.heldout_fraction else 0
    return order[n_held:], order[:n_held]


def _sample_and_evaluate(cfg: Config, output: Path, train: list[SftExample], evaluator: Evaluator,
                         progress: Callable[[str], None]) -> dict[str, Any]:
    """The trained policy on each training task's prompt: how many answers parse, build, are correct."""
    from rl_kernels.policy import SamplingParams
    from rl_kernels.policy.factory import torch_dtype
    from rl_kernels.policy.hf import HFPolicy

    prompts: dict[str, SftExample] = {}
    for ex in train:
        prompts.setdefault(ex.task.id, ex)
    full = cfg.sft.full_finetune
    policy = HFPolicy(str(output) if full else cfg.policy.model, device=cfg.policy.device,
                      dtype=torch_dtype(cfg.policy.dtype, cfg.policy.device), max_loaded_adapters=1,
                      batch_size=cfg.policy.batch_size)
    version = 0 if full else 1
    if not full:
        policy.load_adapter(version, output)
    params = SamplingParams(max_new_tokens=cfg.policy.max_new_tokens, temperature=cfg.policy.temperature,
                            top_p=cfg.policy.top_p, top_k=cfg.policy.top_k, n=cfg.sft.sample_after, seed=cfg.sft.seed)
    counts = Counter()
    reasons: Counter[str] = Counter()
    with (output.parent / SAMPLES).open("w") as log:
        for task_id, ex in prompts.items():
            for completion in policy.generate([ex.messages], params, version)[0]:
                counts["sampled"] += 1
                parsed = parse_completion(completion.text, ex.task, cfg.eval.backend)
                m = evaluator.evaluate(ex.task, parsed.code) if parsed.code is not None else None
                if m is None:
                    outcome = parsed.reason or "no_code"
                else:
                    counts["parsed"] += 1
                    counts["compiled"] += m.compiled
                    counts["correct"] += m.correct
                    outcome = m.rejected or "correct"
                reasons[outcome] += 1
                log.write(json.dumps({"task": task_id, "outcome": outcome, "speedup": m.speedup if m else None,
                                      "text": completion.text}) + "\n")
                log.flush()
            progress(f"sampled {task_id}: {dict(counts)}")
    n = max(counts["sampled"], 1)
    return {**{k: counts[k] for k in ("sampled", "parsed", "compiled", "correct")},
            "parse_rate": counts["parsed"] / n, "compile_rate": counts["compiled"] / n,
            "correct_rate": counts["correct"] / n, "outcomes": dict(reasons)}


def run_warm_start(cfg: Config, progress: Callable[[str], None]) -> dict[str, Any]:
    """The whole stage; returns the report it also writes to run_dir/sft/report.json."""
    from transformers import AutoTokenizer

    from rl_kernels.policy.models import resolve_model

    if cfg.policy.init_adapter is not None:
        raise ConfigError("rl-kernels sft trains an adapter on the base model; policy.init_adapter is what "
                          "`train` starts from (set it to the adapter this job writes), unset it here")
    out = Path(cfg.run_dir) / SFT_DIR
    out.mkdir(parents=True, exist_ok=True)
    loaded = _read(cfg, progress)
    evaluator = Evaluator(cfg.eval)
    progress(f"verifying {len(loaded.items)} kernels with the evaluator ({cfg.eval.backend})")
    done = [0]

    def verified(item: Any, m: Any) -> None:
        done[0] += 1
        progress(f"verified {done[0]}/{len(loaded.items)} {item.task.id} ({item.origin}): "
                 f"{m.rejected or ('correct ' + format(m.speedup or 0, '.2f') + 'x')}")

    built = [0]

    def on_built() -> None:
        built[0] += 1
        progress(f"built {built[0]}/{len(loaded.items)}")

    checked: Verification = verify(loaded.items, evaluator, cfg.sft.jobs or len(os.sched_getaffinity(0)), verified,
                                   on_built)
    # Its fork server and the worker started ahead for a next job held ~1.2 GB beside the training
    # process (docs/MAKE_RUN.md); sampling after training starts an evaluator of its own.
    evaluator.close()
    if not checked.kept:
        raise ConfigError(f"no kernel passed verification ({checked.counts()}); nothing to warm-start on")
    train, held = _split(cfg, _examples(cfg, checked.kept))
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.policy.model))
    enc_train = [encode_example(tokenizer, ex, cfg.sft.max_answer_tokens) for ex in train]
    enc_held = [encode_example(tokenizer, ex, cfg.sft.max_answer_tokens) for ex in held]
    steps_per_epoch = math.ceil(len(enc_train) / cfg.sft.batch_size)
    trainer = SftTrainer(cfg.policy.model, cfg.learner, total_steps=cfg.sft.epochs * steps_per_epoch, lr=cfg.sft.lr,
                         full=cfg.sft.full_finetune)
    held_before = trainer.token_loss(enc_held) if enc_held else None
    losses: list[float] = []
    rng = random.Random(cfg.sft.seed)
    output = out / output_name(cfg)
    with (out / "metrics.jsonl").open("w") as metrics:
        for epoch in range(cfg.sft.epochs):
            order: list[EncodedExample] = rng.sample(enc_train, len(enc_train))
            for b in range(steps_per_epoch):
                stats = trainer.train_step(order[b * cfg.sft.batch_size:(b + 1) * cfg.sft.batch_size])
                losses.append(stats["sft/loss"])
                metrics.write(json.dumps({"step": len(losses), "epoch": epoch, **stats}) + "\n")
                metrics.flush()
                progress(f"sft step {len(losses)}/{cfg.sft.epochs * steps_per_epoch} loss {stats['sft/loss']:.4f}")
            # Each epoch's weights replace the last: a run stopped later keeps a usable one.
            if cfg.sft.full_finetune:
                trainer.save_model(output, tokenizer)
            else:
                trainer.save_adapter(output)
            progress(f"sft epoch {epoch + 1}/{cfg.sft.epochs} done: {output.name} saved to {output}")
    held_after = trainer.token_loss(enc_held) if enc_held else None
    report: dict[str, Any] = {
        "read": len(loaded.items), "skipped": dict(Counter(s.reason for s in loaded.skipped)),
        "verified": len(checked.kept), "refused": checked.counts(),
        "train_examples": len(train), "heldout_examples": len(held),
        "losses": losses, "heldout_loss_before": held_before, "heldout_loss_after": held_after,
        output.name: str(output),
    }
    if cfg.sft.sample_after:
        sampling = Evaluator(cfg.eval)
        try:
            report["samples"] = _sample_and_evaluate(cfg, output, train, sampling, progress)
        finally:
            sampling.close()
    (out / REPORT).write_text(json.dumps(report, indent=1))
    return report
