"""What `rl-kernels compare` samples, fixed before anything starts, so every version gets exactly the
same chance: the versions and their adapters, the tasks, one prompt and one sampling seed per task,
and `compare.samples` completions per task and version.

Version 0 is the run's start: the configured base with no GRPO adapter (a run started from a warm
start has it merged into the base: `policy.init_adapter`, or `policy.model` for a full fine-tune,
both in the run's config.yaml). Any other version is an adapter published under
RUN_DIR/adapters/ (learner/publish.py). The prompt is the one the run sent at its start: plain, or
contrastive with the task's seed kernel as the only exemplar (at the start the archive holds only
the seed), showing the seed's speedup as the run's archive recorded it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rl_kernels.archive import KernelArchive, source_sha256
from rl_kernels.comparison import stable_seed
from rl_kernels.config import Backend, Config, ConfigError
from rl_kernels.policy.base import Messages, SamplingParams
from rl_kernels.policy.factory import sampling_params
from rl_kernels.prompts import Exemplar, build_prompt
from rl_kernels.rollout import SEED_POLICY_VERSION
from rl_kernels.types import Task

PromptMode = Literal["plain", "contrastive"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class ComparePlan:
    run_dir: Path
    name: str                           # RUN_DIR/compare/<name>.json and .md
    versions: list[int]                 # ascending; the first is what the others are compared with
    adapters: dict[int, Path | None]    # None: version 0, the run's start
    tasks: list[Task]
    heldout: bool                       # the split's held-out tasks rather than the training tasks
    prompt: PromptMode
    samples: int                        # completions per task and version
    seeds: dict[str, int]               # task id -> sampling seed, the same for every version

    def headline(self) -> str:
        """The first line the command prints: what will be sampled."""
        kind = "held-out" if self.heldout else "training"
        more = f" and {len(self.tasks) - 6} more" if len(self.tasks) > 6 else ""
        shown = ", ".join(t.id for t in self.tasks[:6]) + more
        total = len(self.versions) * len(self.tasks) * self.samples
        return (f"compare {' vs '.join(f'v{v}' for v in self.versions)} of {self.run_dir}: {len(self.tasks)} "
                f"{kind} task(s) ({shown}) x {self.samples} completions per version = {total} completions, "
                f"{self.prompt} prompts, the same seed per task for every version")


def parse_versions(text: str | None, published: list[int]) -> list[int]:
    """`--versions 0,12` (default: 0 and the newest published adapter), checked against what the run
    directory holds."""
    if text is None:
        if not published:
            raise ConfigError("the run directory has no published adapter under adapters/: nothing to compare "
                              "version 0 with (pass --versions when adapters live elsewhere)")
        return [0, published[-1]]
    try:
        versions = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--versions {text!r}: give comma-separated version numbers, e.g. 0,12") from None
    if len(set(versions)) < 2 or min(versions) < 0:
        raise ConfigError(f"--versions {text!r}: give two or more distinct versions >= 0 (0 is the run's start)")
    missing = [v for v in versions if v and v not in published]
    if missing:
        raise ConfigError(f"no published adapter for version(s) {missing} under adapters/ "
                          f"(published: {published or 'none'})")
    return sorted(set(versions))


def prompt_mode(cfg: Config) -> PromptMode:
    """`compare.prompt` resolved: `run` is what the run's prompts sent at its start."""
    if cfg.compare.prompt != "run":
        return cfg.compare.prompt
    return "plain" if cfg.prompts.mode == "plain" or cfg.prompts.num_exemplars == 0 else "contrastive"


def plan_comparison(cfg: Config, candidates: list[Task], published: dict[int, Path], *, versions: str | None,
                    tasks: list[str] | None, heldout: bool, name: str | None) -> ComparePlan:
    """The plan for the run at `cfg.run_dir`; `candidates` are the run's training tasks, or the
    held-out ones with `heldout`, and `tasks` narrows them; `published` maps the run's published
    versions to their adapter directories. ConfigError names what is wrong."""
    run = Path(cfg.run_dir)
    chosen = _narrow(candidates, tasks, "held-out" if heldout else "training")
    vs = parse_versions(versions, sorted(published))
    name = name or "-".join(f"v{v}" for v in vs) + ("-heldout" if heldout else "")
    if not _NAME.match(name):
        raise ConfigError(f"--name {name!r}: letters, digits, '.', '_' and '-' only (it names files)")
    return ComparePlan(run, name, vs, {v: published[v] if v else None for v in vs}, chosen, heldout,
                       prompt_mode(cfg), cfg.compare.samples,
                       {t.id: stable_seed(cfg.compare.seed, t.id) % 2**31 for t in chosen})


def _narrow(candidates: list[Task], wanted: list[str] | None, kind: str) -> list[Task]:
    if not candidates:
        raise ConfigError(f"the run's config has no {kind} tasks (suite, rollout.tasks, split.*): "
                          "nothing to compare on")
    if wanted is None:
        return candidates
    by_id = {t.id: t for t in candidates}
    unknown = [t for t in wanted if t not in by_id]
    if unknown:
        raise ConfigError(f"--tasks {unknown} are not among the run's {kind} tasks: "
                          + ", ".join(by_id) + ("" if kind == "held-out" else " (--heldout for held-out tasks)"))
    return [by_id[t] for t in dict.fromkeys(wanted)]


def archived_seed(archive_path: Path, task: Task, backend: Backend) -> Exemplar | None:
    """The task's seed kernel with the speedup the run's archive recorded for it (measured at the
    run's start); None when the archive does not hold it."""
    source = task.seeds.get(backend)
    if source is None or not archive_path.is_file():
        return None
    sha = source_sha256(source)
    with KernelArchive(archive_path) as archive:
        for k in archive.kernels(task.id, backend):
            if k.sha256 == sha and k.policy_version == SEED_POLICY_VERSION:
                return Exemplar(k.source, k.speedup)
    return None


def compare_prompt(task: Task, backend: Backend, mode: PromptMode, seed: Exemplar | None) -> tuple[Messages, str]:
    """The task's one prompt and the mode actually sent: a contrastive prompt without a seed that
    passed falls back to plain, as the run's first prompt did (`plain_fallback`)."""
    if mode == "plain":
        return build_prompt(task, backend, [], mode="plain"), "plain"
    if seed is None:
        return build_prompt(task, backend, [], mode="plain"), "plain_fallback"
    return build_prompt(task, backend, [seed], mode="contrastive"), "contrastive"


def compare_sampling(cfg: Config, seed: int) -> SamplingParams:
    """The run's sampling settings with `compare.samples` completions and the task's seed."""
    return dataclasses.replace(sampling_params(cfg.policy, seed=seed), n=cfg.compare.samples)
