"""What each baseline of a task usually measures on this device: the reference an evaluation's own
baseline timing is checked against.

Interleaved timing (candidate, baseline, candidate, ... in one process) cancels load that slows both
sides alike, not load that slows one side more: on a busy CPU host a baseline that runs several
threads or touches more memory loses more than the candidate, and the candidate's speedup grows
with the load. Seen in a training run (docs/LEARNING.md section 16): while tests ran beside the
cpu timer, one group's eager rmsnorm baseline measured 4x its usual median and programs that
measure 0.6-1.3x elsewhere were scored 1.9-2.6x. The evaluator compares every evaluation's
baseline median with this record's median of the same baseline and, beyond `reward.baseline_drift`,
re-measures and then pays no speed term (`Evaluator._evaluate`).

The record holds, per baseline name, the last `keep` medians of

- every baseline job (the cached medians the evaluator picks its baseline from; a fresh job after
  the cache's TTL adds one), and
- every evaluation whose speed was trusted (correct, not flagged, steady, within the drift limit).

Drifted evaluations never enter it: a disturbance, or a candidate that slows the baseline, cannot
move its own reference. A real change of the machine (new clocks, a driver) enters through the
baseline jobs, one per TTL. The reference is the median, so one bad baseline job (measured while a
model loaded beside it) is outvoted by the evaluations around it; below `min_count` medians there
is no reference and nothing is checked.

One JSON file per (task, device, mode, backend, baseline list), beside the baseline cache; written
whole through a rename, so a reader never sees half a file. A file that cannot be read starts an
empty record (the reason is kept in `problem`) rather than failing evaluations.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BaselineRecord:
    """The last `keep` trusted medians (ms) of each baseline, oldest first."""

    path: Path
    keep: int
    min_count: int
    ms: dict[str, list[float]] = field(default_factory=dict)
    problem: str = ""     # why the file on disk was not used ("" when it was, or there was none)

    def __post_init__(self) -> None:
        if self.keep < 1 or not 1 <= self.min_count <= self.keep:
            raise ValueError(f"baseline record needs keep >= 1 and 1 <= min_count <= keep, "
                             f"got keep={self.keep}, min_count={self.min_count}")

    @classmethod
    def load(cls, path: Path, keep: int, min_count: int) -> BaselineRecord:
        record = cls(path, keep, min_count)
        if not path.is_file():
            return record
        try:
            data = json.loads(path.read_text())
            ms = {str(name): [float(v) for v in values] for name, values in data["ms"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            record.problem = f"{path}: unreadable baseline record ({type(exc).__name__}: {exc}); starting empty"
            return record
        record.ms = {name: [v for v in values if v > 0][-keep:] for name, values in ms.items()}
        return record

    def reference(self, baseline: str) -> float | None:
        """The median of the kept medians, or None while fewer than `min_count` are kept."""
        values = self.ms.get(baseline, [])
        return statistics.median(values) if len(values) >= self.min_count else None

    def drift(self, baseline: str, measured_ms: float) -> float | None:
        """How many times further from the reference than 1 the measured median is, either way
        (2.0: twice or half the reference); None without a reference."""
        ref = self.reference(baseline)
        if ref is None or measured_ms <= 0:
            return None
        ratio = measured_ms / ref
        return max(ratio, 1.0 / ratio)

    def add(self, medians: dict[str, float]) -> None:
        """Keeps these medians (one per baseline name) and writes the file."""
        for name, value in medians.items():
            if value > 0:
                values = self.ms.setdefault(name, [])
                values.append(float(value))
                del values[:-self.keep]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"ms": self.ms}))
        tmp.replace(self.path)
