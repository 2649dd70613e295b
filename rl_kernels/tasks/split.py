"""Which tasks are held out from training, so that results on them say something about kernels
the policy never trained on (CUDA-L1 was criticised for reporting on the tasks it trained on).

The split is fixed by the task, not by the run: the same task is held out in every run, every
stage (`sft`, `selftrain`, `rollout`, `train`) and every data source.

  * built-in tasks: the names listed under `heldout:` in `tasks/builtin/suite.yaml`;
  * hgemm tasks: by shape: `M_N_K` is held out when its hash bucket falls below
    `split.heldout_fraction`, for every accumulator alike (a shape seen in training is never a
    held-out shape);
  * tasks of a directory (KernelBench levels): by the file's path below the directory, per level
    alike, the same hash rule (where the clone lives does not change the split);
  * `split.heldout`, when given, replaces all of these with an explicit list of task ids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

from rl_kernels.config import ConfigError, SplitConfig
from rl_kernels.types import Task


class HeldoutLeak(ConfigError):
    """A held-out task turned up where training data or training prompts come from."""


def _bucket(key: str, salt: str) -> float:
    """A uniform draw in [0, 1) fixed by `key`."""
    return int(hashlib.sha256(f"{salt}|{key}".encode()).hexdigest()[:12], 16) / float(1 << 48)


def _split_key(task_id: str) -> str:
    """What the hash rule looks at: the shape of an hgemm task, the path below a suite directory."""
    parts = task_id.split("/")
    if parts[0] == "hgemm" and len(parts) == 3:
        return f"hgemm-shape/{parts[2]}"
    return "/".join(parts[1:]) or task_id


@dataclass(frozen=True)
class TaskSplit:
    """The rule above, for one config; `is_heldout` answers for any task id."""

    cfg: SplitConfig
    builtin_heldout: frozenset[str]   # built-in names from suite.yaml

    def is_heldout(self, task_id: str) -> bool:
        if not self.cfg.enabled:
            return False
        if self.cfg.heldout is not None:
            return task_id in self.cfg.heldout
        if task_id.startswith("builtin/"):
            return task_id.removeprefix("builtin/") in self.builtin_heldout
        return _bucket(_split_key(task_id), self.cfg.salt) < self.cfg.heldout_fraction

    def train(self, tasks: Iterable[Task]) -> list[Task]:
        return [t for t in tasks if not self.is_heldout(t.id)]

    def heldout(self, tasks: Iterable[Task]) -> list[Task]:
        return [t for t in tasks if self.is_heldout(t.id)]

    def refuse_heldout(self, task_ids: Iterable[str], where: str) -> None:
        """Raises `HeldoutLeak` naming every held-out id among `task_ids` (`where` says whose they are)."""
        leaked = sorted({t for t in task_ids if self.is_heldout(t)})
        if leaked:
            shown = ", ".join(leaked[:10]) + (f" and {len(leaked) - 10} more" if len(leaked) > 10 else "")
            raise HeldoutLeak(f"{where} names {len(leaked)} held-out task(s): {shown}. Held-out tasks never "
                              "reach training data or prompts; evaluate them with `rl-kernels heldout` "
                              "(the split: split.* in the config, builtin/suite.yaml's heldout list)")


def task_split(cfg: SplitConfig) -> TaskSplit:
    from rl_kernels.tasks.suites import builtin_heldout

    return TaskSplit(cfg, frozenset(builtin_heldout()))
