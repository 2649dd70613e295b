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
import time
from pathlib import Path
from typing import Any

from rl_kernels.cluster.driver import RolloutDriver
from rl_kernels.cluster.graph import ProducerGraph, build_graph, kill_graph
from rl_kernels.learner.checkpoints import CHECKPOINTS, checkpoint_steps, python_rng_state, rotate_checkpoints
from rl_kernels.learner.publish import adapter_dir, publish_adapter
from rl_kernels.learner.sft import EncodedExample, SftTrainer
from rl_kernels.metrics import MetricsSink, group_metrics
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


class SelfTrainDriver(RolloutDriver):
    SUMMARY = SUMMARY

    def __init__(self, cfg: Any, *, resume: bool = False, progress: bool = True) -> None:
        super().__init__(cfg, resume=resume, progress=False)
        self.say = (lambda line: print(line, flush=True)) if progress else (lambda line: None)
        self.rounds: list[dict[str, Any]] = []
        self.trainer: SftTrainer | None = None
        self._rng = random.Random(cfg.rollout.seed)

    async def _run(self) -> dict[str, Any]:
        sc = self.cfg.selftrain
        self.say(f"selftrain: {sc.rounds} round(s) x {len(self.tasks)} task(s) x {sc.groups_per_task} group(s) of "
                 f"{self.cfg.policy.group_size}; starting the actors")
        graph = self.graph = await build_graph(self.cfg, learner=False)
        self.t0 = time.monotonic()
        sink = self._sink = MetricsSink(self.run_dir, self.cfg.metrics, run_config=self.cfg.model_dump(mode="json"),
                                        name=self.run_dir.name, resume=self.resume)
        stop = asyncio.Event()
        consumer = asyncio.create_task(self._consume(graph, stop))
        try:
            first = await self._resume_rounds(graph) if self.resume else 1
            await self._seed_archive(graph)
            for r in range(first, sc.rounds + 1):
                groups = await self._sample_round(graph, r)
                if self._errors:
                    break
                record = await self._train_round(graph, r, groups)
                self.rounds.append(record)
                with (self.run_dir / ROUNDS).open("a") as f:   # the round's commit
                    f.write(json.dumps(record) + "\n")
                sink.log(record, step=r)
                self.say(f"round {r}: v{record['selftrain/sampled_version']} sampled {record['selftrain/samples']}, "
                         f"compiled {record['selftrain/compiled']}, correct {record['selftrain/correct']}, kept "
                         f"{record['selftrain/kept']} -> {record['selftrain/sft_steps']} sft step(s), loss "
                         f"{record.get('selftrain/loss', float('nan')):.4f}, now v{self.version}")
        finally:
            stop.set()
            await consumer
            sink.close()
            kill_graph(graph)
        summary = {**self.tally.summary(), "rounds": self.rounds, "version": self.version,
                   "wall_s": time.monotonic() - self.t0, "archive": self.archive.summary(),
                   "run_dir": str(self.run_dir)}
        (self.run_dir / self.SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
        if self._errors:
            raise self._errors[0]
        return summary

    async def _sample_round(self, graph: ProducerGraph, r: int) -> list[Group]:
        wanted = [t for t in self.tasks for _ in range(self.cfg.selftrain.groups_per_task)]
        done = [0]

        async def one(task: Task) -> Group | None:
            gid = self._group_id()
            self._submitted += 1
            version = await self._wait_slot(graph, gid, None)
            assert version is not None
            group = await self._group(graph, gid, version, task, None)
            if group is None:
                return None
            done[0] += 1
            correct = sum(bool(t.measurement and t.measurement.correct) for t in group.trajectories)
            self.say(f"round {r}: group {done[0]}/{len(wanted)} {task.id} v{version}: {correct}/{len(group.trajectories)} correct")
            return group

        groups = [g for g in await asyncio.gather(*(one(t) for t in wanted)) if g is not None]
        self._recent.clear()   # the rollout's ticker reports these; here the round record does
        return groups

    async def _train_round(self, graph: ProducerGraph, r: int, groups: list[Group]) -> dict[str, Any]:
        sc = self.cfg.selftrain
        trajs = [t for g in groups for t in g.trajectories]
        examples = round_examples(groups, sc.keep, sc.dedupe, sc.max_answer_tokens)
        record: dict[str, Any] = {
            "selftrain/round": r, "selftrain/sampled_version": self.version, "selftrain/samples": len(trajs),
            "selftrain/compiled": sum(bool(t.measurement and t.measurement.compiled) for t in trajs),
            "selftrain/correct": sum(bool(t.measurement and t.measurement.correct) for t in trajs),
            "selftrain/kept": len(examples), "selftrain/sft_steps": 0,
            **{f"batch/{k.split('/', 1)[1]}": v for k, v in group_metrics(groups).items()}}
        if not examples:
            return record
        losses = self._fine_tune(examples)   # nothing else runs between rounds: the loop may block here
        version = self.version + 1
        path = publish_adapter(self.trainer.save_adapter, self.run_dir, version)   # type: ignore[union-attr]
        checkpoints = self.run_dir / CHECKPOINTS
        self.trainer.save_checkpoint(checkpoints, r, {"shuffle_rng": self._rng.getstate()})   # type: ignore[union-attr]
        rotate_checkpoints(checkpoints, self.cfg.train.keep_checkpoints)
        await self._announce(graph, version, path)
        record.update({"selftrain/sft_steps": len(losses), "selftrain/loss": sum(losses) / len(losses),
                       "selftrain/loss_first": losses[0], "selftrain/loss_last": losses[-1], "policy/version": version})
        return record

    async def _announce(self, graph: ProducerGraph, version: int, path: Path) -> None:
        """Make `version` the one new groups are sampled with."""
        await graph.buffer.set_version.remote(version)
        await asyncio.gather(*(g.load_adapter.remote(version, str(path)) for g in graph.generators.actors),
                             return_exceptions=True)   # a dead generator reloads on its next request
        self.version, self._adapter_paths[version] = version, str(path)

    async def _resume_rounds(self, graph: ProducerGraph) -> int:
        """Pick up after the last committed round: its records, its trainer state, its version;
        returns the round to run next."""
        log = self.run_dir / ROUNDS
        self.rounds = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []
        trained = [r for r in self.rounds if r["selftrain/sft_steps"]]
        if trained:
            last = trained[-1]
            step, version = int(last["selftrain/round"]), int(last["policy/version"])
            if step not in checkpoint_steps(self.run_dir / CHECKPOINTS):
                raise FileNotFoundError(f"{self.run_dir}: round {step} is committed in {ROUNDS} but its checkpoint "
                                        f"{CHECKPOINTS}/step-{step} is missing; cannot continue its adapter")
            state = self._trainer().load_checkpoint(self.run_dir / CHECKPOINTS, step)
            self._rng.setstate(python_rng_state(state["shuffle_rng"]))
            await self._announce(graph, version, adapter_dir(self.run_dir, version))
        first = len(self.rounds) + 1
        self.say(f"selftrain: resuming {self.run_dir} after round {first - 1} of {self.cfg.selftrain.rounds} "
                 f"at v{self.version}" + ("" if first <= self.cfg.selftrain.rounds else "; every round is done"))
        return first

    def _fine_tune(self, examples: list[EncodedExample]) -> list[float]:
        """`selftrain.epochs` passes over the round's kept samples; the trainer persists across rounds."""
        sc = self.cfg.selftrain
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
            init = Path(self.cfg.policy.init_adapter) if self.cfg.policy.init_adapter else None
            self.trainer = SftTrainer(self.cfg.policy.model, self.cfg.learner, init_adapter=init,
                                      lr=self.cfg.selftrain.lr)
        return self.trainer
