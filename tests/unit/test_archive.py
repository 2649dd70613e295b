"""The kernel archive: only verified kernels enter, duplicates collapse, several processes can write,
and exemplar sampling draws different speedup buckets, favouring fast ones as tau shrinks."""

from __future__ import annotations

import dataclasses
import multiprocessing
import random
import sqlite3
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rl_kernels.archive import ArchivedKernel, KernelArchive, pick_exemplars, source_sha256
from rl_kernels.types import Measurement

TASK = "relu"


def verified(speedup: float, task: str = TASK, backend: str = "cpu", **kw: object) -> Measurement:
    fields: dict[str, object] = dict(
        task=task, backend=backend, mode="kernel", compiled=True, correct=True,
        candidate_ms=1.0 / speedup, baseline_ms=1.0, baseline="eager", speedup=speedup, noise=0.01,
        reward=1.5, device="cpu:0-1")
    fields.update(kw)
    return Measurement(**fields)  # type: ignore[arg-type]


def kernel_src(i: int) -> str:
    return f"__global__ void k{i}(float* x) {{ x[{i}] = 0; }}\n"


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[KernelArchive]:
    with KernelArchive(tmp_path / "run" / "archive.sqlite") as a:
        yield a


@pytest.mark.parametrize("failure", [
    dict(correct=False),
    dict(compiled=False, correct=False),
    dict(rejected="side_stream"),
    dict(flagged="speedup above the roofline"),
    dict(speedup=None),
    dict(speedup=float("inf")),
    dict(speedup=0.0),
])
def test_only_kernels_that_passed_every_gate_enter(archive: KernelArchive, failure: dict) -> None:
    m = dataclasses.replace(verified(2.0), **failure)
    assert archive.add(TASK, kernel_src(0), m, policy_version=0, backend="cpu") is False
    assert archive.count() == 0 and archive.tasks() == [] and archive.best(TASK, "cpu") is None


@pytest.mark.parametrize("untrusted", [{"unstable_measurement": {"candidate_spread": 1.4}},
                                       {"baseline_drift": {"baseline_ms": 4.0, "reference_ms": 1.0}}])
def test_an_untrusted_speed_is_never_best_nor_an_exemplar(archive: KernelArchive, untrusted: dict) -> None:
    """A slow kernel that makes its timing erratic reads 9x: it must not outrank honest kernels."""
    for i, speedup in enumerate((1.1, 1.3, 1.6)):
        archive.add(TASK, kernel_src(i), verified(speedup), policy_version=0, backend="cpu")
    gamed = dataclasses.replace(verified(9.0), extra=untrusted)
    assert archive.add(TASK, kernel_src(9), gamed, policy_version=1, backend="cpu") is False
    best = archive.best(TASK, "cpu")
    assert best is not None and best.speedup == 1.6
    assert [row["best_speedup"] for row in archive.summary()] == [1.6]
    exemplars = archive.sample_exemplars(TASK, "cpu", 3, random.Random(0), num_buckets=3, tau=0.1)
    assert source_sha256(kernel_src(9)) not in {k.sha256 for k in exemplars}
    assert archive.count() == 3


def test_flagged_kernels_go_to_the_review_list_not_the_archive(archive: KernelArchive) -> None:
    flag = "speedup 25.00x above the ceiling 10.0x after 1 independent re-measurement(s)"
    m = dataclasses.replace(verified(25.0), flagged=flag, reward=0.0)
    assert archive.add(TASK, kernel_src(0), m, policy_version=3, backend="cpu") is False
    assert archive.count() == 0 and archive.best(TASK, "cpu") is None
    [held] = archive.review_list()
    assert held["task_id"] == TASK and held["flagged"] == flag and held["policy_version"] == 3
    assert held["measurement"]["speedup"] == 25.0
    # An incorrect flagged measurement is a plain failure: nothing to review.
    archive.add(TASK, kernel_src(1), dataclasses.replace(m, correct=False), policy_version=3, backend="cpu")
    assert len(archive.review_list()) == 1


def test_measurement_of_another_task_is_a_caller_bug(archive: KernelArchive) -> None:
    with pytest.raises(ValueError):
        archive.add("gelu", kernel_src(0), verified(2.0), policy_version=0, backend="cpu")
    with pytest.raises(ValueError):
        archive.add(TASK, kernel_src(0), verified(2.0), policy_version=0, backend="cuda")


def test_stores_the_measurement_and_provenance(archive: KernelArchive) -> None:
    m = verified(2.0, shared_device=True)
    assert archive.add(TASK, kernel_src(1), m, policy_version=7, backend="cpu", created_at=100.0)
    k = archive.best(TASK, "cpu")
    assert k == ArchivedKernel(
        task_id=TASK, backend="cpu", sha256=source_sha256(kernel_src(1)), source=kernel_src(1),
        speedup=2.0, candidate_ms=0.5, baseline="eager", baseline_ms=1.0, noise=0.01, reward=1.5,
        device="cpu:0-1", mode="kernel", shared_device=True, policy_version=7, created_at=100.0,
        last_seen_at=100.0, submissions=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.speedup = 3.0  # type: ignore[misc]


def test_duplicates_keep_the_best_measurement_and_are_counted(archive: KernelArchive) -> None:
    src = kernel_src(1)
    same_modulo_whitespace = "\n" + src.replace("\n", "   \r\n") + "\n\n"
    archive.add(TASK, src, verified(1.5), policy_version=1, backend="cpu", created_at=10.0)
    archive.add(TASK, same_modulo_whitespace, verified(2.5, reward=2.0), policy_version=2,
                backend="cpu", created_at=20.0)
    archive.add(TASK, src, verified(1.2), policy_version=3, backend="cpu", created_at=30.0)
    [k] = archive.kernels(TASK, "cpu")
    assert (k.speedup, k.reward, k.submissions) == (2.5, 2.0, 3)
    assert (k.policy_version, k.created_at, k.last_seen_at) == (1, 10.0, 30.0)
    # Dedup is per (task, backend): the same source elsewhere is a different entry.
    archive.add(TASK, src, verified(1.1, backend="cuda"), policy_version=1, backend="cuda")
    archive.add("gelu", src, verified(1.1, task="gelu"), policy_version=1, backend="cpu")
    assert archive.count() == 3


def test_ordering_best_tasks_and_summary(archive: KernelArchive) -> None:
    for i, (s, v) in enumerate([(1.5, 0), (3.0, 4), (0.8, 2)]):
        archive.add(TASK, kernel_src(i), verified(s), policy_version=v, backend="cpu")
    archive.add(TASK, kernel_src(0), verified(1.0), policy_version=5, backend="cpu")
    archive.add("gelu", kernel_src(9), verified(1.1, task="gelu"), policy_version=1, backend="cpu")
    assert [k.speedup for k in archive.kernels(TASK, "cpu")] == [3.0, 1.5, 0.8]
    assert archive.best(TASK, "cpu").speedup == 3.0  # type: ignore[union-attr]
    assert archive.tasks() == ["gelu", TASK] and archive.count() == 4
    assert archive.summary() == [
        dict(task_id="gelu", backend="cpu", count=1, submissions=1, best_speedup=1.1, best_policy_version=1),
        dict(task_id=TASK, backend="cpu", count=3, submissions=4, best_speedup=3.0, best_policy_version=4),
    ]


def test_empty_task(archive: KernelArchive) -> None:
    assert archive.best("nope", "cpu") is None
    assert archive.kernels("nope", "cpu") == []
    assert archive.summary() == []
    assert archive.sample_exemplars("nope", "cpu", 2, random.Random(0), num_buckets=4, tau=1.0) == []


def test_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite"
    with KernelArchive(path) as a:
        a.add(TASK, kernel_src(1), verified(2.0), policy_version=3, backend="cpu", created_at=5.0)
    with KernelArchive(path) as a:
        assert a.kernels(TASK, "cpu")[0].policy_version == 3
        assert a._query("PRAGMA journal_mode")[0][0] == "wal"


def test_refuses_another_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite"
    KernelArchive(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(RuntimeError, match="schema v99"):
        KernelArchive(path)


def _writer(path: Path, worker: int, n: int, both_open: multiprocessing.synchronize.Barrier) -> None:
    with KernelArchive(path) as a:
        both_open.wait()  # so the writes really overlap instead of running one process after the other
        for i in range(n):
            a.add(TASK, kernel_src(1000 * worker + i), verified(1.0 + i), policy_version=worker,
                  backend="cpu")
            a.add(TASK, kernel_src(0), verified(1.0 + i), policy_version=worker, backend="cpu")


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite"
    ctx = multiprocessing.get_context("spawn")
    both_open = ctx.Barrier(2, timeout=30)
    n = 100
    procs = [ctx.Process(target=_writer, args=(path, w, n, both_open)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    with KernelArchive(path) as a:
        assert a.count() == 2 * n + 1
        shared = next(k for k in a.kernels(TASK, "cpu") if k.sha256 == source_sha256(kernel_src(0)))
        assert shared.submissions == 2 * n and shared.speedup == float(n)


def fake(speedup: float, i: int) -> ArchivedKernel:
    return ArchivedKernel(
        task_id=TASK, backend="cpu", sha256=f"{i:064x}", source=kernel_src(i), speedup=speedup,
        candidate_ms=None, baseline=None, baseline_ms=None, noise=None, reward=1.0, device="",
        mode="kernel", shared_device=False, policy_version=0, created_at=0.0, last_seen_at=0.0,
        submissions=1)


# 4 quantile buckets of 5 kernels each: ~1x, ~2x, ~4x, ~8x.
POOL = [fake(base * (1 + 0.01 * j), 10 * b + j)
        for b, base in enumerate([1.0, 2.0, 4.0, 8.0]) for j in range(5)]


def bucket_of(k: ArchivedKernel) -> int:
    """POOL encodes 10 * bucket + index in the fake hash."""
    return int(k.sha256, 16) // 10


def test_exemplars_come_from_different_buckets_slowest_first() -> None:
    rng = random.Random(0)
    for _ in range(200):
        picks = pick_exemplars(POOL, 3, rng, num_buckets=4, tau=1.0)
        assert len({bucket_of(k) for k in picks}) == 3
        assert [k.speedup for k in picks] == sorted(k.speedup for k in picks)


def test_sampling_is_deterministic_given_the_rng() -> None:
    def draw(seed: int) -> list[list[ArchivedKernel]]:
        rng = random.Random(seed)
        return [pick_exemplars(POOL, 2, rng, num_buckets=4, tau=0.5) for _ in range(20)]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_fast_buckets_are_favoured_more_as_tau_shrinks() -> None:
    def top_bucket_share(tau: float) -> float:
        rng = random.Random(1)
        hits = Counter(bucket_of(k) for _ in range(2000)
                       for k in pick_exemplars(POOL, 1, rng, num_buckets=4, tau=tau))
        return hits[3] / 2000

    shares = [top_bucket_share(tau) for tau in (100.0, 1.0, 0.3, 0.05)]
    assert shares[0] == pytest.approx(0.25, abs=0.04)  # large tau: uniform over buckets
    assert shares == sorted(shares) and shares[-1] > 0.99


def test_fewer_kernels_than_requested_returns_what_exists(archive: KernelArchive) -> None:
    archive.add(TASK, kernel_src(1), verified(3.0), policy_version=0, backend="cpu")
    archive.add(TASK, kernel_src(2), verified(1.5), policy_version=0, backend="cpu")
    got = archive.sample_exemplars(TASK, "cpu", 2, random.Random(0), num_buckets=4, tau=1.0)
    assert [k.speedup for k in got] == [1.5, 3.0]
    archive.add(TASK, kernel_src(3), verified(2.0), policy_version=0, backend="cpu")
    got = archive.sample_exemplars(TASK, "cpu", 2, random.Random(0), num_buckets=4, tau=1.0)
    assert len({k.sha256 for k in got}) == 2


def test_rejects_impossible_sampling_requests() -> None:
    with pytest.raises(ValueError):
        pick_exemplars(POOL, 3, random.Random(0), num_buckets=2, tau=1.0)
    with pytest.raises(ValueError):
        pick_exemplars(POOL, 2, random.Random(0), num_buckets=4, tau=0.0)


def test_threads_share_one_instance(archive: KernelArchive) -> None:
    """The replay buffer is a threaded actor: its methods may call one archive from several threads."""
    def work(i: int) -> None:
        archive.add(TASK, kernel_src(i), verified(1.0 + i), policy_version=0, backend="cpu")
        archive.kernels(TASK, "cpu")

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(work, range(40)))
    assert archive.count() == 40
