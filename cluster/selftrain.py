"""`rl-kernels selftrain`: stage 2, rounds of sampling the policy through the rollout pipeline,
keeping what the evaluator verified, and fine-tuning on it.

Per round (CUDA-L1's self-training: REINFORCE with reward 1 for a kept sample and 0 otherwise,
no baseline, which is supervised fine-tuning on the kept samples):

    every training task x `selftrain.groups_per_task` groups, sampled with the newest version
    through the same generators, compile pool and timers as `rollout` (persisted to
    trajectories.jsonl, verified kernels archived) -> keep the samples the evaluator found correct
    (or compiled: `selftrain.keep`) -> answer-token cross-entropy on exactly the tokens the policy
    sampled, after exactly the prompt tokens it saw -> the adapter is published as the next
    version, the generators load it, the next round samples with it.

The trainer lives in this process (`learner.device`), one LoRA adapter trained across rounds on
top of the base (plus `policy.init_adapter`, merged as the generators merge it).  A round that keeps
nothing trains nothing and publishes nothing.

A finished round is committed by one line in `selftrain_rounds.jsonl`, after its adapter is
published and the trainer's state (adapter weights, optimizer moments, schedule, RNGs) is
checkpointed under `checkpoints/step-<round>`.  `--resume` continues after the last committed
round: the trainer reloads that checkpoint, the generators load its version, and a round that was
cut short is sampled again from its start (its groups stay in trajectories.jsonl and its verified
kernels in the archive; they are not trained on twice).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rl_kernels.cluster.driver import RunContext
from rl_kernels.cluster.search import drain
from rl_kernels.learner.checkpoints import CHECKPOINTS, checkpoint_steps, python_rng_state, rotate_checkpoints
from rl_kernels.learner.publish import adapter_dir, publish_adapter
from rl_kernels.learner.sft import EncodedExample, SftTrainer
from rl_kernels.metrics import group_metrics
from rl_kernels.trajectories import Group, Trajectory
from rl_kernels.types import Task

SUMMARY = "selftrain_summary.json"
ROUNDS = "selftrain_rounds.jsonl"   # one line per finished round: the commit point a resume starts after


def kept(t: Trajectory, rule: str) -> bool:
    """The round's keep rule on one scored sample."""
    m = t.measurement
    return m is not None and (m.correct if rule == "correct" else m.compiled)


def round_examples(groups: list[Group], rule: str, dedupe: bool, max_answer_tokens: int) -> list[EncodedExample]:
    """The kept samples as (prompt tokens, sampled tokens); one per distinct answer of a task with `dedupe`."""
    seen: set[tuple[str, str]] = set()
    out = []
    for g in groups:
        for t in g.trajectories:
            if not kept(t, rule) or not t.token_ids:
                continue
            if dedupe and (g.task_id, t.completion) in seen:
                continue
            seen.add((g.task_id, t.completion))
            out.append(EncodedExample(list(g.prompt_token_ids), list(t.token_ids[:max_answer_tokens])))
    return out


class RoundsStage:
    LEARNER = False
    SUMMARY = SUMMARY
    BAR = False   # the per-group and per-round lines are the progress report

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.rounds: list[dict[str, Any]] = []
        self.trainer: SftTrainer | None = None
        self._rng = random.Random(ctx.cfg.rollout.seed)    # the fine-tuning's shuffles; checkpointed
        self.first = 1                                     # the round to run next (after a resume, later)
        self.round = 0
        self._expected = 0                                 # groups the round started
        self._finished: list[Group | None] = []            # its groups that ended (None: failed)
        self._round_done = asyncio.Event()

    async def start(self) -> None:
        sc, ctx = self.ctx.cfg.selftrain, self.ctx
        ctx.say(f"selftrain: {sc.rounds} round(s) x {len(ctx.tasks)} task(s) x {sc.groups_per_task} group(s) of "
                f"{ctx.cfg.policy.group_size}")
        if ctx.resume:
            self.first = await self._resume_rounds()

    async def tasks(self) -> AsyncIterator[Task]:
        """Round after round: every training task x `selftrain.groups_per_task`, then (once all of
        them ended) the fine-tuning on what they verified, before the next round is sampled."""
        ctx, sc = self.ctx, self.ctx.cfg.selftrain
        for r in range(self.first, sc.rounds + 1):
            wanted = [t for t in ctx.tasks for _ in range(sc.groups_per_task)]
            self.round, self._expected, self._finished = r, len(wanted), []
            self._round_done.clear()
            for task in wanted:
                yield task
            await self._round_done.wait()
            if ctx.producer.errors:
                return
            groups = [g for g in self._finished if g is not None]
            record = await self._train_round(r, groups)
            self.rounds.append(record)
            with (ctx.run_dir / ROUNDS).open("a") as f:   # the round's commit
                f.write(json.dumps(record) + "\n")
            ctx.sink.log(record, step=r)
            ctx.say(f"round {r}: v{record['selftrain/sampled_version']} sampled {record['selftrain/samples']}, "
                    f"compiled {record['selftrain/compiled']}, correct {record['selftrain/correct']}, kept "
                    f"{record['selftrain/kept']} -> {record['selftrain/sft_steps']} sft step(s), loss "
                    f"{record.get('selftrain/loss', float('nan')):.4f}, now v{ctx.versions.current}")

    def stopped(self) -> bool:
        return bool(self.ctx.producer.errors)

    async def consume(self, stop: asyncio.Event) -> None:
        await drain(self.ctx, stop)

    def on_group(self, group: Group | None) -> None:
        self._finished.append(group)
        if group is not None:
            correct = sum(bool(t.measurement and t.measurement.correct) for t in group.trajectories)
            self.ctx.say(f"round {self.round}: group {len(self._finished)}/{self._expected} {group.task_id} "
                         f"v{group.policy_version}: {correct}/{len(group.trajectories)} correct")
        if len(self._finished) == self._expected:
            self._round_done.set()

    def metrics_step(self) -> int:
        return self.round

    async def summary(self, base: dict[str, Any]) -> dict[str, Any]:
        return {**base, "rounds": self.rounds, "version": self.ctx.versions.current}

    async def _train_round(self, r: int, groups: list[Group]) -> dict[str, Any]:
        ctx, sc = self.ctx, self.ctx.cfg.selftrain
        trajs = [t for g in groups for t in g.trajectories]
        examples = round_examples(groups, sc.keep, sc.dedupe, sc.max_answer_tokens)
        record: dict[str, Any] = {
            "selftrain/round": r, "selftrain/sampled_version": ctx.versions.current, "selftrain/samples": len(trajs),
            "selftrain/compiled": sum(bool(t.measurement and t.measurement.compiled) for t in trajs),
            "selftrain/correct": sum(bool(t.measurement and t.measurement.correct) for t in trajs),
            "selftrain/kept": len(examples), "selftrain/sft_steps": 0,
            **{f"batch/{k.split('/', 1)[1]}": v for k, v in group_metrics(groups).items()}}
        if not examples:
            return record
        losses = self._fine_tune(examples)   # nothing else runs between rounds: the loop may block here
        trainer = self._trainer()
        version = ctx.versions.current + 1
        path = publish_adapter(trainer.save_adapter, ctx.run_dir, version)
        checkpoints = ctx.run_dir / CHECKPOINTS
        trainer.save_checkpoint(checkpoints, r, {"shuffle_rng": self._rng.getstate()})
        rotate_checkpoints(checkpoints, ctx.cfg.train.keep_checkpoints)
        await self._announce(version, path)
        record.update({"selftrain/sft_steps": len(losses), "selftrain/loss": sum(losses) / len(losses),
                       "selftrain/loss_first": losses[0], "selftrain/loss_last": losses[-1], "policy/version": version})
        return record

    async def _announce(self, version: int, path: Path) -> None:
        """Make `version` the one new groups are sampled with."""
        ctx = self.ctx
        await ctx.graph.buffer.set_version.remote(version)
        ctx.versions.publish(version, path)
        await ctx.versions.announce(ctx.graph.generators.actors, version)

    async def _resume_rounds(self) -> int:
        """Pick up after the last committed round: its records, its trainer state, its version;
        returns the round to run next."""
        ctx = self.ctx
        log = ctx.run_dir / ROUNDS
        self.rounds = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []
        trained = [r for r in self.rounds if r["selftrain/sft_steps"]]
        if trained:
            last = trained[-1]
            step, version = int(last["selftrain/round"]), int(last["policy/version"])
            if step not in checkpoint_steps(ctx.run_dir / CHECKPOINTS):
                raise FileNotFoundError(f"{ctx.run_dir}: round {step} is committed in {ROUNDS} but its checkpoint "
                                        f"{CHECKPOINTS}/step-{step} is missing; cannot continue its adapter")
            state = self._trainer().load_checkpoint(ctx.run_dir / CHECKPOINTS, step)
            self._rng.setstate(python_rng_state(state["shuffle_rng"]))
            await self._announce(version, adapter_dir(ctx.run_dir, version))
        first = len(self.rounds) + 1
        ctx.say(f"selftrain: resuming {ctx.run_dir} after round {first - 1} of {ctx.cfg.selftrain.rounds} "
                f"at v{ctx.versions.current}" + ("" if first <= ctx.cfg.selftrain.rounds else "; every round is done"))
        return first

    def _fine_tune(self, examples: list[EncodedExample]) -> list[float]:
        """`selftrain.epochs` passes over the round's kept samples; the trainer persists across rounds."""
        sc = self.ctx.cfg.selftrain
        trainer = self._trainer()
        losses = []
        for _ in range(sc.epochs):
            order = self._rng.sample(examples, len(examples))
            for b in range(math.ceil(len(order) / sc.batch_size)):
                stats = trainer.train_step(order[b * sc.batch_size:(b + 1) * sc.batch_size])
                losses.append(stats["sft/loss"])
        return losses

    def _trainer(self) -> SftTrainer:
        """The rounds' trainer, built on first use (the base model plus policy.init_adapter)."""
        if self.trainer is None:
            cfg = self.ctx.cfg
            init = Path(cfg.policy.init_adapter) if cfg.policy.init_adapter else None
            self.trainer = SftTrainer(cfg.policy.model, cfg.learner, init_adapter=init, lr=cfg.selftrain.lr,
                                      probe_magnify_to=cfg.policy.delivery_magnify_to)
        return self.trainer
