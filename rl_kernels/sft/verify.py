"""Every warm-start kernel re-verified by the evaluator before it is trained on.

A released corpus says its kernels are correct on its authors' machine, against its authors'
checks; ours may be stricter (CUDA-L2's "F32" kernels that accumulate in fp16, CUDA-L1's cuBLAS
calls) or the kernel may not build here.  Training on an unverified kernel would teach the policy
exactly what the evaluator refuses, so only items that pass every gate are kept, each with its
measurement (the speedup feeds the contrastive exemplars), and every other item is counted under
the evaluator's reason code.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from rl_kernels.archive import passed_every_gate
from rl_kernels.evaluation.build import build_many
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.sft.sources import SftItem, Skipped
from rl_kernels.types import Measurement


@dataclass(frozen=True)
class VerifiedKernel:
    item: SftItem
    measurement: Measurement


@dataclass
class Verification:
    kept: list[VerifiedKernel] = field(default_factory=list)
    refused: list[Skipped] = field(default_factory=list)   # reason: the evaluator's code

    def counts(self) -> dict[str, int]:
        """Refusals per reason code, for the report."""
        return dict(Counter(s.reason for s in self.refused))


def verify(items: list[SftItem], evaluator: Evaluator, jobs: int,
           on_done: Callable[[SftItem, Measurement], None] = lambda item, m: None,
           on_built: Callable[[], None] = lambda: None) -> Verification:
    """Builds every item in a pool of `jobs` processes (`on_built` after each build), then evaluates
    them one at a time (`on_done` after each evaluation)."""
    builds = build_many([(i.task, i.source) for i in items], evaluator.cfg, jobs, on_done=on_built)
    out = Verification()
    for item, build in zip(items, builds):
        m = evaluator.evaluate(item.task, item.source, build)
        on_done(item, m)
        if passed_every_gate(m):
            out.kept.append(VerifiedKernel(item, m))
        else:
            reason = m.rejected or ("flagged" if m.correct else "incorrect")   # correct: its speed not believed
            out.refused.append(Skipped(item.origin, reason, m.detail[:300]))
    return out
