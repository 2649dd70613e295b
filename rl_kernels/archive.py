"""Per-task store of verified kernels: the exemplar database of Contrastive-RL prompts, and the product.

One SQLite file in the run directory.  The replay buffer writes to it while generators (other
processes, maybe other threads of one actor) read exemplars from it, so it runs in WAL mode (readers
never block the writer), every write is one short ``BEGIN IMMEDIATE`` transaction, and a busy
timeout makes concurrent writers wait instead of failing.

Only kernels that passed every gate with a believed speed enter (`passed_every_gate`): anything else
would teach the policy from a hack, a wrong answer or a speed its own erratic timing inflated.  A kernel is identified by the sha256 of its normalised source per (task, backend), so
a policy that re-emits the same kernel does not flood the exemplars; the re-submission is counted
and the best measurement of it is kept.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rl_kernels.evaluation.reward import untrusted_speed
from rl_kernels.types import Measurement

SCHEMA_VERSION = 1

# Separate statements: `executescript` would commit the enclosing transaction first.
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS kernels (
        task_id TEXT NOT NULL,
        backend TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        source TEXT NOT NULL,
        speedup REAL NOT NULL,
        candidate_ms REAL,
        baseline TEXT,
        baseline_ms REAL,
        noise REAL,
        reward REAL NOT NULL,
        device TEXT NOT NULL,
        mode TEXT NOT NULL,
        shared_device INTEGER NOT NULL,
        policy_version INTEGER NOT NULL,
        created_at REAL NOT NULL,
        last_seen_at REAL NOT NULL,
        submissions INTEGER NOT NULL,
        PRIMARY KEY (task_id, backend, sha256))""",
    "CREATE INDEX IF NOT EXISTS kernels_by_speedup ON kernels (task_id, backend, speedup DESC)",
    # Correct kernels whose speedup stayed implausible after independent re-measurement: they earn
    # nothing and never become exemplars until a person has looked (the review list).
    """CREATE TABLE IF NOT EXISTS review (
        task_id TEXT NOT NULL,
        backend TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        source TEXT NOT NULL,
        flagged TEXT NOT NULL,
        measurement TEXT NOT NULL,
        policy_version INTEGER NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (task_id, backend, sha256))""",
)

_COLUMNS = ("task_id", "backend", "sha256", "source", "speedup", "candidate_ms", "baseline",
            "baseline_ms", "noise", "reward", "device", "mode", "shared_device", "policy_version",
            "created_at", "last_seen_at", "submissions")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM kernels"
_MEASUREMENT = ("source", "speedup", "candidate_ms", "baseline", "baseline_ms", "noise", "reward",
                "device", "mode", "shared_device")
# A re-submission takes the new measurement only when faster (SET reads the pre-update row).
_UPSERT = (
    f"INSERT INTO kernels ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
    "ON CONFLICT (task_id, backend, sha256) DO UPDATE SET "
    + ", ".join(f"{c} = CASE WHEN excluded.speedup > speedup THEN excluded.{c} ELSE {c} END"
                for c in _MEASUREMENT)
    + ", submissions = submissions + 1, last_seen_at = MAX(last_seen_at, excluded.last_seen_at)"
)
# Deterministic order (ties broken by hash) so sampling with a seeded rng is reproducible.
_ORDER = "ORDER BY speedup DESC, sha256 ASC"


@dataclass(frozen=True)
class ArchivedKernel:
    """One distinct verified kernel.

    The measurement fields are those of its best measurement; `policy_version` and `created_at`
    record who first produced it (provenance), `last_seen_at` and `submissions` how often the policy
    keeps producing it (a sign of mode collapse when they grow).
    """

    task_id: str
    backend: str
    sha256: str
    source: str
    speedup: float
    candidate_ms: float | None
    baseline: str | None
    baseline_ms: float | None
    noise: float | None
    reward: float
    device: str
    mode: str
    shared_device: bool
    policy_version: int
    created_at: float
    last_seen_at: float
    submissions: int


def normalise_source(source: str) -> str:
    """Whitespace-only normalisation: line endings, trailing spaces, blank edges.

    Comments and identifiers are kept: stripping them safely needs a C++/Python lexer, and a
    near-duplicate that slips through only costs one exemplar slot.
    """
    lines = [line.rstrip() for line in source.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def source_sha256(source: str) -> str:
    return hashlib.sha256(normalise_source(source).encode()).hexdigest()


def speed_believed(m: Measurement) -> bool:
    """Neither flagged (implausibly fast) nor untrusted (unsettled timing, drifted baseline): only a
    believed speed may rank a kernel, or a kernel that games its timing would rank above honest ones."""
    return m.flagged is None and not untrusted_speed(m)


def passed_every_gate(m: Measurement) -> bool:
    """Compiled, correct, not rejected, with a believed, finite, positive speedup: the one test of
    everything that ranks kernels by speed (archive, exemplars, export, report, compare, held-out)."""
    return (m.compiled and m.correct and m.rejected is None and speed_believed(m)
            and m.speedup is not None and math.isfinite(m.speedup) and m.speedup > 0)


class KernelArchive:
    """The archive of one run: `KernelArchive(run_dir / "archive.sqlite")`.

    One instance per process (a connection must not cross a fork); inside a process it may be
    shared by threads, which are serialised by a lock.
    """

    def __init__(self, path: Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Autocommit mode: transactions are opened explicitly, so none is ever left open by accident.
        self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        self._enable_wal(busy_timeout_s)
        self._db.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; safe with WAL
        with self._write():
            for statement in _SCHEMA:
                self._db.execute(statement)
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                self._db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise RuntimeError(f"{self.path} has archive schema v{row[0]}, this code reads "
                                   f"v{SCHEMA_VERSION}; use a new run directory")

    def _enable_wal(self, timeout_s: float) -> None:
        """Switch to WAL, waiting for other processes that open the same file at the same moment.

        Changing the journal mode needs an exclusive lock, and SQLite can report "database is
        locked" for it at once instead of calling the busy handler (seen in CI when two processes
        opened a new archive together), so this retries until the busy timeout.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One `BEGIN IMMEDIATE` transaction under the thread lock; rolled back on error.

        IMMEDIATE takes the write lock up front, so two writers wait on the busy timeout instead of
        failing on a read-to-write lock upgrade.
        """
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            committed = False
            try:
                yield
                self._db.execute("COMMIT")
                committed = True
            finally:
                if not committed:
                    self._db.execute("ROLLBACK")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> KernelArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, task_id: str, source: str, m: Measurement, *, policy_version: int, backend: str,
            created_at: float | None = None) -> bool:
        """Store a verified kernel; False (nothing stored) when `m` failed any gate.

        A kernel already archived for (task, backend) keeps the provenance of its first submission
        and the fastest of its measurements, and has its submission count bumped.
        """
        if m.task != task_id or m.backend != backend:
            raise ValueError(f"measurement of {m.task}/{m.backend} added as {task_id}/{backend}")
        if m.flagged is not None and m.correct and m.rejected is None:
            self._hold_for_review(task_id, backend, source, m, policy_version, created_at)
            return False
        if not passed_every_gate(m):
            return False
        now = time.time() if created_at is None else created_at
        row = (task_id, backend, source_sha256(source), source, m.speedup, m.candidate_ms,
               m.baseline, m.baseline_ms, m.noise, m.reward, m.device, m.mode, int(m.shared_device),
               policy_version, now, now, 1)
        with self._write():
            self._db.execute(_UPSERT, row)
        return True

    def _hold_for_review(self, task_id: str, backend: str, source: str, m: Measurement, policy_version: int,
                         created_at: float | None) -> None:
        row = (task_id, backend, source_sha256(source), source, m.flagged, json.dumps(m.to_json()), policy_version,
               time.time() if created_at is None else created_at)
        with self._write():
            self._db.execute("INSERT OR REPLACE INTO review VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)

    def review_list(self) -> list[dict[str, object]]:
        """Flagged kernels (correct, but implausibly fast after re-measurement), newest first."""
        rows = self._query("SELECT task_id, backend, sha256, flagged, measurement, policy_version, created_at "
                           "FROM review ORDER BY created_at DESC")
        keys = ("task_id", "backend", "sha256", "flagged", "measurement", "policy_version", "created_at")
        return [dict(zip(keys, r), measurement=json.loads(r[4])) for r in rows]

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def kernels(self, task_id: str, backend: str) -> list[ArchivedKernel]:
        """Every distinct kernel of the task, fastest first."""
        rows = self._query(f"{_SELECT} WHERE task_id = ? AND backend = ? {_ORDER}", (task_id, backend))
        return [_kernel(r) for r in rows]

    def best(self, task_id: str, backend: str) -> ArchivedKernel | None:
        rows = self._query(f"{_SELECT} WHERE task_id = ? AND backend = ? {_ORDER} LIMIT 1",
                           (task_id, backend))
        return _kernel(rows[0]) if rows else None

    def tasks(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT task_id FROM kernels ORDER BY task_id")]

    def count(self) -> int:
        """Distinct kernels over all tasks and backends."""
        return self._query("SELECT COUNT(*) FROM kernels")[0][0]

    def summary(self) -> list[dict[str, object]]:
        """Per (task, backend): distinct kernels, submissions, best speedup and who produced it."""
        # SQLite fills the bare column policy_version from the row that holds MAX(speedup).
        rows = self._query("SELECT task_id, backend, COUNT(*), SUM(submissions), MAX(speedup), "
                           "policy_version FROM kernels GROUP BY task_id, backend "
                           "ORDER BY task_id, backend")
        keys = ("task_id", "backend", "count", "submissions", "best_speedup", "best_policy_version")
        return [dict(zip(keys, r)) for r in rows]

    def sample_exemplars(self, task_id: str, backend: str, n: int, rng: random.Random, *,
                         num_buckets: int, tau: float) -> list[ArchivedKernel]:
        """Contrastive-RL exemplars, slowest first so the prompt reads as a progression."""
        return pick_exemplars(self.kernels(task_id, backend), n, rng, num_buckets=num_buckets, tau=tau)


def pick_exemplars(kernels: list[ArchivedKernel], n: int, rng: random.Random, *, num_buckets: int,
                   tau: float) -> list[ArchivedKernel]:
    """n kernels from n different speedup buckets, favouring fast buckets as tau shrinks.

    Buckets are equal-count quantiles of log-speedup (log, so that tau means the same thing whether
    a task's speedups sit near 1x or near 5x).  Buckets are drawn without replacement with
    probability softmax((bucket mean - overall mean) / tau), so the prompt contrasts kernels of
    different quality; then one kernel uniformly inside each drawn bucket.
    """
    if not 0 < n <= num_buckets:
        raise ValueError(f"need 0 < n <= num_buckets to draw from different buckets (n={n}, "
                         f"num_buckets={num_buckets})")
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau}")
    ordered = sorted(kernels, key=lambda k: (k.speedup, k.sha256))
    if len(ordered) <= n:
        return ordered
    b = min(num_buckets, len(ordered))
    bounds = [i * len(ordered) // b for i in range(b + 1)]
    buckets = [ordered[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    logs = [math.log(k.speedup) for k in ordered]
    overall = sum(logs) / len(logs)
    scores = [(sum(logs[lo:hi]) / (hi - lo) - overall) / tau for lo, hi in zip(bounds, bounds[1:])]
    remaining = list(range(b))
    chosen: list[ArchivedKernel] = []
    for _ in range(n):
        top = max(scores[i] for i in remaining)
        weights = [math.exp(scores[i] - top) for i in remaining]
        pick = rng.choices(remaining, weights=weights)[0]
        remaining.remove(pick)
        chosen.append(rng.choice(buckets[pick]))
    return sorted(chosen, key=lambda k: (k.speedup, k.sha256))


def _kernel(row: tuple) -> ArchivedKernel:
    fields = dict(zip(_COLUMNS, row))
    fields["shared_device"] = bool(fields["shared_device"])
    return ArchivedKernel(**fields)
