"""`rl-kernels rollout` end to end on a local CPU Ray cluster: the whole producer graph with a real
policy, real builds (cpu backend) and real evaluations; nothing is mocked.

The policy is a one-layer Llama *trained* in the module fixture (a few seconds on the CPU) to answer
any prompt with one valid answer for builtin/scale_bias_relu: the task's cpu seed plus a comment, a
kernel of its own in the archive (the archive keys on the source) that builds from the same C++ as
the seed (the build cache keys on the captured C++, so after the seed every build is a cache hit).

What must hold: every group the driver starts ends in trajectories.jsonl exactly once with its G
trajectories, each measured or carrying a parse reason, and the archive, metrics.jsonl and the
summary agree with that file; killing a compile actor and the timer mid-call loses no candidate and
counts none twice; a small staleness budget holds the producer back instead of dropping anything.

Cost on an idle 2-core machine: a few minutes, all of it real work: ~7 s per evaluation (one
timer; the correctness phase on 4096x1024 inputs is most of it; identical kernels of a group are
evaluated once except in the killed-actors test) and, when the session's build cache is fresh,
one ~70 s build of the torch precompiled header with the seed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

ray = pytest.importorskip("ray")
from tiny_model import save_memorizing_llama  # noqa: E402

from rl_kernels.actors.compiler import COMPILER_FAILED  # noqa: E402
from rl_kernels.actors.timer import TIMER_FAILED  # noqa: E402
from rl_kernels.cluster.driver import Driver  # noqa: E402
from rl_kernels.cluster.search import SUMMARY, SearchStage  # noqa: E402
from rl_kernels.cluster.graph import kill_graph  # noqa: E402
from rl_kernels.archive import KernelArchive, passed_every_gate, source_sha256  # noqa: E402
from rl_kernels.config import Config, load_config  # noqa: E402
from rl_kernels.metrics import read_metrics  # noqa: E402
from rl_kernels.policy import SamplingParams  # noqa: E402
from rl_kernels.policy.hf import HFPolicy  # noqa: E402
from rl_kernels.prompts import Exemplar, build_prompt  # noqa: E402
from rl_kernels.rollout import SEED_POLICY_VERSION  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402
from rl_kernels.trajectories import Group, read_groups  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASK = "builtin/scale_bias_relu"
SEED = get_task(TASK).seeds["cpu"]
CODE = "# one fused pass over the rows: scale, bias and ReLU per element\n" + SEED
ANSWER = (
    "### Performance analysis\n"
    "Each element is read once and written once, so the kernel is bound by memory traffic.\n"
    "### Algorithm design\n"
    "One fused loop over rows and features; scale and bias stay in cache.\n"
    "### Code\n"
    f"```python\n{CODE}```\n"
)
MAX_NEW_TOKENS = len(ANSWER.splitlines()) + 8  # one token per line, EOS, and some slack
T = TypeVar("T")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_memorizing_llama(tmp_path_factory.mktemp("memorizing"), ANSWER)


def _config(run_dir: Path, model_dir: Path, cache_dir: Path, *overrides: str) -> Config:
    """The embedded default (cpu backend, 2 compilers, 1 timer) with the trained policy, one task,
    groups of 3, and the session's build cache (the module PCH is built once). Timing keeps its
    protocol (30 interleaved samples, fresh inputs per call) but with a small input pool and one
    warm-up call: an evaluation then takes ~6 s here instead of ~10."""
    return load_config(REPO / "configs" / "local.yaml", [
        f"run_dir={run_dir}", f"policy.model={model_dir}", f"policy.max_new_tokens={MAX_NEW_TOKENS}",
        "policy.group_size=3", f"rollout.tasks=[{TASK}]", "rollout.max_groups=3", "rollout.slot_poll_s=0.1",
        "metrics.interval_s=1", "metrics.wandb=false", f"eval.build.cache_dir={cache_dir}",
        "eval.sandbox.timeout_s=120", "eval.timing.warmup=1", f"eval.timing.cpu_cache_bytes={2**20}",
        *overrides])


def _wait_for(what: str, check: Callable[[], T | None], timeout_s: float, alive: threading.Thread) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        assert alive.is_alive(), f"the driver ended before {what}"
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {timeout_s:.0f} s")


@contextmanager
def _driver_in_thread(driver: Driver) -> Iterator[tuple[threading.Thread, dict[str, Any]]]:
    """`driver.run()` in a thread while the body kills its actors; then waits for it, re-raises its
    error, and leaves its summary in the yielded dict.  A driver that outlives the test loses its
    actors first (a failed test must not leave a driver holding the timer's device)."""
    result: dict[str, Any] = {}

    def run_driver() -> None:
        try:
            result["summary"] = driver.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread below
            result["error"] = exc

    thread = threading.Thread(target=run_driver, name="rollout-driver", daemon=True)
    thread.start()
    try:
        yield thread, result
        thread.join(600)
    finally:
        if thread.is_alive() and driver.graph is not None:
            kill_graph(driver.graph)
            thread.join(60)
    assert not thread.is_alive(), "the driver did not finish"
    if "error" in result:
        raise result["error"]


def _check_run(run_dir: Path, summary: dict[str, Any], *, groups: int, group_size: int) -> list[Group]:
    """What every rollout must satisfy; returns the persisted groups."""
    persisted = [g for _, g in read_groups(run_dir)]
    ids = [g.group_id for g in persisted]
    assert len(ids) == len(set(ids)) == groups, f"groups persisted: {ids}"
    trajs = [t for g in persisted for t in g.trajectories]
    for g in persisted:
        assert g.task_id == TASK and g.backend == "cpu" and g.policy_version == 0
        assert [t.index for t in g.trajectories] == list(range(group_size))
        assert g.prompt_token_ids, "the learner needs the prompt's token ids"
    for t in trajs:  # each completion scored exactly once: measured, or a parse reason
        assert (t.measurement is not None) == (t.source is not None), t
        assert t.measurement is not None or t.detail, t

    buf = summary["buffer"]
    assert buf["submitted"] == groups == buf["accepted"] + buf["filtered"] + buf["failed"] + buf["running"]
    assert buf["running"] == 0 and buf["failed"] == 0 and buf["dropped_stale"] == 0
    assert buf["persisted_groups"] == groups and buf["persisted_trajectories"] == len(trajs)
    measured = [t.measurement for t in trajs if t.measurement is not None]
    assert summary["groups"] == groups and summary["completions"] == len(trajs)
    assert summary["parsed"] == len(measured)
    assert summary["compiled"] == sum(m.compiled for m in measured)
    assert summary["correct"] == sum(m.correct for m in measured)
    assert sum(summary["group_status"].values()) == groups
    assert json.loads((run_dir / SUMMARY).read_text()) == json.loads(json.dumps(summary, default=str))

    # metrics.jsonl: every finished group is reported exactly once, in one of the records
    records = read_metrics(run_dir)
    assert sum(r.get("rollout/trajectories", 0) for r in records) == len(trajs)
    return persisted


def test_memorizing_policy_answers_any_prompt(model_dir: Path) -> None:
    """The fixture's policy really learned the answer: sampled at temperature 1 from a plain and a
    contrastive rollout prompt and an unrelated one, it gives back the answer, then EOS."""
    policy = HFPolicy(model_dir)
    task = get_task(TASK)
    prompts = [build_prompt(task, "cpu", [], mode="plain"),
               build_prompt(task, "cpu", [Exemplar(SEED, 1.8), Exemplar(CODE, 1.9)], mode="contrastive"),
               [{"role": "user", "content": "write a fast kernel"}]]
    params = SamplingParams(n=16, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=MAX_NEW_TOKENS, seed=0)
    for out in policy.generate(prompts, params, 0):
        exact = [c for c in out if c.text == ANSWER]
        assert len(exact) >= 12, [c.text[:200] for c in out if c.text != ANSWER][:2]
        assert all(c.finish_reason == "stop" and not c.truncated for c in exact)


def test_rollout_scores_and_archives_every_group(ray_cluster: Any, model_dir: Path, cache_dir: Path,
                                                 tmp_path: Path) -> None:
    run = tmp_path / "run"
    summary = Driver(SearchStage, _config(run, model_dir, cache_dir), progress=False).run()
    groups = _check_run(run, summary, groups=3, group_size=3)

    trajs = [t for g in groups for t in g.trajectories]
    good = [t for t in trajs if t.measurement is not None and t.measurement.correct]
    # The memorizing policy samples its answer most of the time (>= 12 of 16, the test above), not
    # always: every completion that is the answer must be scored correct; the others may be anything.
    exact = [t for t in trajs if t.completion == ANSWER]
    assert exact and all(t in good for t in exact), [t.measurement or t.detail for t in exact]
    # Identical kernels in a group were measured once (rollout.dedupe_group_sources), plus the seed.
    assert summary["evaluated"] == 1 + sum(len({t.source for t in g.trajectories if t.source}) for g in groups)
    for g in groups:
        by_source = {t.source: t.reward for t in g.trajectories if t.source}
        assert all(t.reward == by_source[t.source] for t in g.trajectories if t.source)
    for t in good:
        m = t.measurement
        assert m.compiled and m.rejected is None and m.speedup is not None and m.speedup > 0
        # A speedup the evaluator flags (host load can make one implausible) earns the fail reward and is
        # neither archived nor a "best"; every other correct kernel earns more than any failure.
        assert (t.reward == 0.0) if m.flagged else (t.reward > 0), (m.flagged, t.reward)
    trusted = [t for t in good if passed_every_gate(t.measurement)]
    assert trusted, [t.measurement.flagged for t in good]
    assert all(g.extra["prompt_mode"] == "contrastive" for g in groups)  # the seed was archived first

    with KernelArchive(run / "archive.sqlite") as archive:
        kernels = {k.sha256: k for k in archive.kernels(TASK, "cpu")}
    seed, mine = kernels[source_sha256(SEED)], kernels[source_sha256(CODE)]
    assert seed.policy_version == SEED_POLICY_VERSION and seed.submissions == 1
    assert mine.policy_version == 0
    assert mine.submissions == sum(t.source == CODE for t in trusted)  # re-emissions counted, not re-added
    assert summary["best_speedup_per_task"][TASK] == pytest.approx(max(t.measurement.speedup for t in trusted))

    records = read_metrics(run)
    keys = set().union(*records)
    for key in ("rollout/reward_mean", "rollout/correct_rate", "rollout/compile_rate", "rollout/speedup_p50",
                "pipeline/queue/compile", "pipeline/queue/time", "pipeline/util/timers",
                "pipeline/util/compilers", "pipeline/idle/producer_blocked", "pipeline/buffer/running",
                "pipeline/tokens_per_s", "policy/version"):
        assert key in keys, key
    assert records[-1]["pipeline/groups/accepted"] + records[-1]["pipeline/groups/filtered"] == 3
    assert records[-1]["pipeline/util/timers"] > 0 and records[-1]["pipeline/tokens_per_s"] > 0


def test_a_generator_restarted_mid_run_leaves_the_metrics_going(ray_cluster: Any, model_dir: Path, cache_dir: Path,
                                                                 tmp_path: Path) -> None:
    """The generator is killed mid-generation (Ray restarts it) while the driver writes a metrics
    record every 0.2 s: the records go on, counting it unavailable while Ray restarts it, the lost
    generation is retried, and the run ends with its summary."""
    run = tmp_path / "run"
    driver = Driver(SearchStage, _config(run, model_dir, cache_dir, "rollout.max_groups=2", "metrics.interval_s=0.2",
                                         "prompts.mode=plain", "cluster.restart_timeout_s=120"), progress=False)
    with _driver_in_thread(driver) as (thread, result):
        graph = _wait_for("producer graph", lambda: driver.graph, 300, thread)
        generator = graph.generators.actors[0]
        _wait_for("generation in flight", lambda: ray.get(generator.stats.remote())["in_flight"] is not None, 300, thread)
        killed_at = time.time()
        ray.kill(generator, no_restart=False)
    _check_run(run, result["summary"], groups=2, group_size=3)
    assert result["summary"]["generators"][0]["restarted"]
    records = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
               if "pipeline/generators_unavailable" in r]
    assert any(r["pipeline/generators_unavailable"] == 1 for r in records), "no record saw the restart"
    assert any(r["time"] > killed_at and r["pipeline/generators_unavailable"] == 0 for r in records), \
        "no record after the generator came back"


def test_rollout_survives_killed_compiler_and_timer(ray_cluster: Any, model_dir: Path, cache_dir: Path,
                                                    tmp_path: Path) -> None:
    """A compile actor and the timer are killed (Ray restarts them) while each has a call in flight:
    those calls are retried once on the restarted actor or recorded as compiler_failed /
    timer_failed; every candidate ends with exactly one measurement, every group exactly once."""
    run = tmp_path / "run"
    # Plain prompts: no seed to measure first, so the first builds are the groups' own. Every
    # completion measured on its own (no dedupe): a group's identical kernels keep both compile
    # actors busy at once.
    driver = Driver(SearchStage, _config(run, model_dir, cache_dir, "rollout.max_groups=3", "cluster.num_compilers=2",
                                   "prompts.mode=plain", "cluster.restart_timeout_s=120",
                                   "rollout.dedupe_group_sources=false"), progress=False)
    with _driver_in_thread(driver) as (thread, result):
        graph = _wait_for("producer graph", lambda: driver.graph, 300, thread)
        # Both compile actors busy: the one killed is mid-build (capture subprocess, cache lookup).
        _wait_for("build on every compile actor",
                  lambda: graph.compilers.busy == len(graph.compilers.actors), 300, thread)
        ray.kill(graph.compilers.actors[0], no_restart=False)
        timer = graph.timers.actors[0]
        before = _wait_for("evaluation in flight",
                           lambda: (s := ray.get(timer.stats.remote()))["in_flight"] and s, 300, thread)
        ray.kill(timer, no_restart=False)
    summary = result["summary"]

    groups = _check_run(run, summary, groups=3, group_size=3)
    after = summary["timers"][0]
    assert after["restarted"] and after["pid"] != before["pid"]  # the timer really died and came back
    measured = [t.measurement for g in groups for t in g.trajectories if t.measurement is not None]
    for t in (t for g in groups for t in g.trajectories if t.source == CODE):
        m = t.measurement  # the killed calls end as a successful retry or as a recorded failure
        assert m.correct or m.rejected in (COMPILER_FAILED, TIMER_FAILED), (m.rejected, m.detail[-500:])
    # each successful build went to the timer exactly once (a retry is inside that one call)
    assert summary["evaluated"] == sum(m.compiled for m in measured)
    assert all(g.extra["prompt_mode"] == "plain" for g in groups)
    with KernelArchive(run / "archive.sqlite") as archive:  # plain prompts: no seed, the model's kernels
        kernels = archive.kernels(TASK, "cpu")
    assert source_sha256(CODE) in {k.sha256 for k in kernels} and {k.policy_version for k in kernels} == {0}
    # a pool sends an actor one request at a time, so each kill hit one call: at most one failure each
    rejected = [m.rejected for m in measured]
    assert rejected.count(COMPILER_FAILED) <= 1 and rejected.count(TIMER_FAILED) <= 1, rejected


@pytest.mark.slow   # ~27 s on 2 cores; the same hold is tested on the actors (test_actors_ray)
def test_rollout_backpressure_holds_the_producer(ray_cluster: Any, model_dir: Path, cache_dir: Path,
                                                 tmp_path: Path) -> None:
    """One slot (max_staleness 0, batch 1) and a generator much faster than the timer: the producer
    waits for the slot, never more than one group is in flight or buffered, nothing is dropped."""
    run = tmp_path / "run"
    cfg = _config(run, model_dir, cache_dir, "rollout.max_staleness=0", "rollout.batch_groups=1",
                  "policy.group_size=2", "rollout.max_groups=3", "prompts.mode=plain")
    summary = Driver(SearchStage, cfg, progress=False).run()
    _check_run(run, summary, groups=3, group_size=2)

    buf = summary["buffer"]
    assert buf["capacity"] <= 1 and buf["refused"] > 0
    assert summary["pipeline"]["pipeline/idle/producer_blocked"] > 0
    records = read_metrics(run)
    assert len(records) >= 2
    for r in records:
        assert r["pipeline/buffer/running"] + r["pipeline/buffer/buffered"] <= 1, r
        assert r["pipeline/groups/failed"] == 0
    assert max(r["pipeline/buffer/refused"] for r in records) > 0
