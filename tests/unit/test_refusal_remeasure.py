"""Which refusals get one more measurement before they stand: the two that rest on a few samples
against the host's clock, never a refusal that a hack's own output or build decides."""

from __future__ import annotations

import pytest

from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.evaluation.reasons import CLOCK_GAP, Reason
from rl_kernels.types import Measurement


def _refused(reason: Reason, detail: str) -> Measurement:
    return Measurement(task="t", backend="cuda", mode="kernel", rejected=reason.value, detail=detail)


@pytest.mark.parametrize("reason, detail, statistical", [
    (Reason.ASYNC_ESCAPE, "work finished 31.2 us after the timed region ended", True),
    (Reason.TIMER_PATCHED, f"{CLOCK_GAP} the events explain 10% of the wall time", True),
    (Reason.TIMER_PATCHED, "timing functions were replaced: synchronize", False),
    (Reason.INCORRECT, "max abs err 3.1", False),
    (Reason.NO_CUSTOM_KERNEL, "no kernel of the candidate's own ran", False),
])
def test_only_noise_prone_refusals_are_measured_again(reason: Reason, detail: str, statistical: bool) -> None:
    assert Evaluator._statistical_refusal(_refused(reason, detail)) is statistical
