"""Held-out figures: the policy of one version sampled on the tasks it never trained on.

For every held-out task (rl_kernels/tasks/split.py) `split.samples` completions of a plain prompt
(no exemplars: held-out tasks have no archive of their own, and the same prompt serves every
prompt-mode arm of an ablation) are parsed, built and evaluated like training completions, but
nothing is archived and nothing is trained on.  Reported per version:

  pass@1          mean over tasks of (correct samples / samples)
  pass@k          share of tasks with at least one correct sample among its k = samples
  parse / compile / correct rate   over all samples
  geomean_speedup geometric mean over the solved tasks of the best correct kernel's speedup
  solved          tasks with a correct kernel (the geomean's denominator)
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from rl_kernels.archive import passed_every_gate
from rl_kernels.config import Config
from rl_kernels.policy.base import BASE_VERSION, SamplingParams
from rl_kernels.policy.factory import sampling_params
from rl_kernels.prompts.builder import build_prompt
from rl_kernels.prompts.parsing import parse_completion
from rl_kernels.types import Measurement, Task

HELDOUT_FILE = "heldout.jsonl"


@dataclass
class TaskTally:
    """One held-out task's samples."""

    task_id: str
    samples: int = 0
    parsed: int = 0
    compiled: int = 0
    correct: int = 0
    speedups: list[float] = field(default_factory=list)   # of the samples that passed every gate
    outcomes: dict[str, int] = field(default_factory=dict)   # reason code (or "correct"/parse reason) -> count

    def add(self, parse_reason: str | None, m: Measurement | None) -> None:
        """One sample: `m` is None when no code could be parsed (`parse_reason` says why)."""
        self.samples += 1
        if m is None:
            key = parse_reason or "no_code"
        else:
            self.parsed += 1
            self.compiled += int(m.compiled)
            self.correct += int(m.correct)
            if passed_every_gate(m):   # a flagged speedup is not believed, so it never counts
                self.speedups.append(m.speedup)
            key = m.rejected or ("correct" if m.correct else "incorrect")
        self.outcomes[key] = self.outcomes.get(key, 0) + 1


def summarize(tallies: Iterable[TaskTally], version: int) -> dict[str, Any]:
    """The figures of the module docstring, plus the per-task tallies."""
    tallies = list(tallies)
    n = sum(t.samples for t in tallies)
    best = [max(t.speedups) for t in tallies if t.speedups]
    return {
        "version": version, "tasks": len(tallies), "samples": n,
        "pass@1": sum(t.correct / t.samples for t in tallies if t.samples) / len(tallies) if tallies else 0.0,
        "pass@k": sum(t.correct > 0 for t in tallies) / len(tallies) if tallies else 0.0,
        "k": max((t.samples for t in tallies), default=0),
        "parse_rate": sum(t.parsed for t in tallies) / n if n else 0.0,
        "compile_rate": sum(t.compiled for t in tallies) / n if n else 0.0,
        "correct_rate": sum(t.correct for t in tallies) / n if n else 0.0,
        "solved": len(best),
        "geomean_speedup": math.exp(sum(map(math.log, best)) / len(best)) if best else None,
        "per_task": [vars(t) for t in tallies],
    }


def heldout_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The summary as `heldout/*` scalars for the metrics sink (kept apart from training tasks)."""
    keys = ("pass@1", "pass@k", "parse_rate", "compile_rate", "correct_rate", "solved", "geomean_speedup")
    return {f"heldout/{k}": float(summary[k]) for k in keys if summary.get(k) is not None}


def summary_line(summary: dict[str, Any]) -> str:
    """One console line of a held-out summary (the `heldout` command's and train's)."""
    g = summary["geomean_speedup"]
    return (f"held-out v{summary['version']}: pass@1 {summary['pass@1']:.2f}, pass@{summary['k']} "
            f"{summary['pass@k']:.2f} over {summary['tasks']} tasks; compiled {summary['compile_rate']:.0%}, "
            f"correct {summary['correct_rate']:.0%} of {summary['samples']} samples; geomean speedup "
            f"{f'{g:.3f}x' if g else '-'} over {summary['solved']} solved task(s)")


def heldout_prompt(task: Task, backend: str) -> list[dict[str, str]]:
    return build_prompt(task, backend, [], mode="plain")


def heldout_sampling(cfg: Config) -> SamplingParams:
    """The policy's sampling settings with `split.samples` completions per task and a fixed seed
    (every version is sampled the same way)."""
    return dataclasses.replace(sampling_params(cfg.policy, seed=cfg.rollout.seed), n=cfg.split.samples)


def append_report(run_dir: Path, summary: dict[str, Any]) -> None:
    """One line per evaluated version in run_dir/heldout.jsonl."""
    with (Path(run_dir) / HELDOUT_FILE).open("a") as f:
        f.write(json.dumps(summary) + "\n")


def evaluate_heldout(cfg: Config, tasks: list[Task], version: int, adapter: Path | None,
                     progress: Callable[[str], None]) -> dict[str, Any]:
    """Samples the policy of `version` (its adapter on the configured base; None: the base itself)
    on `tasks` in this process and evaluates every parsed answer; no Ray needed."""
    from rl_kernels.evaluation.evaluator import Evaluator
    from rl_kernels.policy.factory import make_policy

    if not tasks:
        raise ValueError("no held-out tasks in this suite (split.*): nothing to evaluate")
    policy = make_policy(cfg.policy, max_loaded_adapters=1)
    if adapter is not None:
        policy.load_adapter(version, adapter)
    params = heldout_sampling(cfg)
    evaluator = Evaluator(cfg.eval)
    backend = cfg.eval.backend
    tallies = []
    for i, task in enumerate(tasks):
        tally = TaskTally(task.id)
        completions = policy.generate([heldout_prompt(task, backend)], params, version if adapter else BASE_VERSION)[0]
        for c in completions:
            parsed = parse_completion(c.text, task, backend)
            tally.add(parsed.reason, evaluator.evaluate(task, parsed.code) if parsed.code is not None else None)
        tallies.append(tally)
        progress(f"held-out {i + 1}/{len(tasks)} {task.id}: {tally.correct}/{tally.samples} correct, "
                 f"{tally.compiled} compiled, outcomes {tally.outcomes}")
    return summarize(tallies, version)
