"""The evaluator's trust boundary through the whole evaluator (cpu backend): what an attack leaves
on the host, what the capture step of a build may do, fresh entropy, flagged speedups, and what a
candidate finds of later calls' input values when it reads every set it can reach.

The verdicts of the red-team candidates are in the hack manifest (test_hacks_cpu.py); this module
checks the side effects a verdict cannot show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.build import build_candidate
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.evaluation.reward import correct_reward, untrusted_speed, untrusted_speed_reward
from rl_kernels.tasks import get_task
from rl_kernels.tasks.module import load_module_task

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
HGEMM = "hgemm/fp32/128_128_128"


def _survivors() -> list[int]:
    """Processes that still run the evaluation worker (a forked candidate would be one)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"rl_kernels.evaluation.worker" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_raw_write_never_reaches_the_host(cpu_config: EvalConfig) -> None:
    marker = Path("/tmp/rlk_trust_open_marker")
    marker.unlink(missing_ok=True)
    source = (CANDIDATES / "hacks" / "trust" / "raw_open_cpu.cpp").read_text()
    m = Evaluator(cpu_config).evaluate(get_task(HGEMM), source)
    assert not marker.exists(), "the candidate wrote on the host"
    assert m.rejected in (None, "sandbox_violation"), m.detail[-500:]   # inert: it then computes honestly


def test_a_raw_fork_is_killed_and_leaves_nothing_running(cpu_config: EvalConfig) -> None:
    before = set(_survivors())
    source = (CANDIDATES / "hacks" / "trust" / "raw_fork_cpu.cpp").read_text()
    m = Evaluator(cpu_config).evaluate(get_task(HGEMM), source)
    assert m.rejected == "sandbox_violation" and "seccomp" in m.detail, m.detail[-500:]
    assert m.reward == cpu_config.reward.fail_reward
    assert set(_survivors()) - before == set()


def test_a_forged_verdict_fools_the_shared_boundary_but_not_the_split_one(cpu_config: EvalConfig) -> None:
    """The candidate writes a made-up "correct, 2x faster" final line to every inherited descriptor
    and exits.  Where it runs next to the result pipe (shared) that line is the verdict; in the
    runner (split, the default) there is no result pipe to write to."""
    source = (CANDIDATES / "hacks" / "trust" / "forged_verdict_cpu.cpp").read_text()
    task = get_task(HGEMM)
    split = Evaluator(cpu_config).evaluate(task, source)
    assert split.rejected == "crash" and "runner" in split.detail, split.detail[-500:]
    assert split.reward == cpu_config.reward.fail_reward
    shared_cfg = cpu_config.model_copy(update={"sandbox": cpu_config.sandbox.model_copy(update={"boundary": "shared"})})
    shared = Evaluator(shared_cfg).evaluate(task, source)
    assert shared.correct and shared.speedup == pytest.approx(2.0), (shared.rejected, shared.detail[-300:])


def test_the_capture_step_is_confined(cpu_config: EvalConfig, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A module's top level runs during the build: even code the static gate never saw (this calls
    the build directly) cannot write on the host, read the cache or the caller's secrets, or spawn."""
    cfg = cpu_config.build.model_copy(update={"cache_dir": tmp_path / "cache"})
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "secret.txt").write_text("cache-secret")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret")
    marker = tmp_path / "marker"
    task = load_module_task(CANDIDATES / "hacks" / "tasks" / "relu.py", task_id="test/relu")
    probe = f"""
import os
seen = []
for what, action in [
    ("write", lambda: open({str(marker)!r}, "w").write("x")),
    ("read", lambda: open({str(tmp_path / 'cache' / 'secret.txt')!r}).read()),
    ("env", lambda: os.environ.get("WANDB_API_KEY", "unset")),
]:
    try:
        seen.append(f"{{what}} {{action()}}")
    except OSError as exc:
        seen.append(f"{{what}} {{type(exc).__name__}}")
"""
    build = build_candidate(task, probe + "raise RuntimeError(seen)\n", "cpu", cfg)
    assert not build.ok
    assert not marker.exists()
    assert "'write FileNotFoundError'" in build.log   # the caller's /tmp is an empty, read-only tmpfs there
    assert "'read FileNotFoundError'" in build.log and "'env unset'" in build.log
    assert "cache-secret" not in build.log and "wandb-secret" not in build.log
    spawn = build_candidate(task, probe + "os.system('true')\n", "cpu", cfg)
    assert spawn.reason == "sandbox_violation" and "seccomp" in spawn.log


def test_every_evaluation_draws_fresh_entropy_and_records_it(cpu_config: EvalConfig) -> None:
    source = (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text()
    evaluator = Evaluator(cpu_config)
    first, second = (evaluator.evaluate(get_task(HGEMM), source) for _ in range(2))
    assert first.correct and second.correct, (first.detail, second.detail)
    seeds = first.extra["seeds"] + second.extra["seeds"]      # one per measurement (more if re-measured)
    assert len(seeds) >= 2 and len(set(seeds)) == len(seeds)
    fixed = Evaluator(cpu_config.model_copy(update={"seed": 7})).evaluate(get_task(HGEMM), source)
    # every measurement of it uses the fixed seed (a loaded machine may make the evaluator re-measure)
    assert fixed.extra["seeds"] and set(fixed.extra["seeds"]) == {7}


def test_a_flagged_speedup_earns_nothing(cpu_config: EvalConfig) -> None:
    """Above the ceiling after re-measuring (each in a new process on new inputs): no reward.

    The task's reference applies ReLU 1000 times; the honest one-pass kernel is ~100 times faster,
    far above the default ceiling of 10x, whatever else runs on the machine."""
    task = load_module_task(CANDIDATES / "honest" / "tasks" / "relu_repeated.py", task_id="test/relu_repeated")
    cfg = cpu_config.model_copy(update={"baselines": cpu_config.baselines.model_copy(update={"module": ["eager"]})})
    m = Evaluator(cfg).evaluate(task, (CANDIDATES / "honest" / "relu_cpu.py").read_text())
    assert m.correct and m.rejected is None, m.detail
    assert m.speedup > cfg.reward.speedup_ceiling, f"precondition: the one-pass kernel ran at {m.speedup:.2f}x"
    assert m.flagged and "independent re-measurement" in m.flagged
    assert m.reward == cfg.reward.fail_reward
    # the suspicious speedup was re-measured (more measurements if host load also made one unstable
    # or pushed a window over the clock check), each on new inputs
    seeds = m.extra["seeds"]
    assert len(seeds) >= 1 + cfg.reward.remeasure_attempts and len(set(seeds)) == len(seeds)


def test_a_slow_kernel_that_jitters_its_own_timing_earns_less_than_a_1x_kernel(cpu_config: EvalConfig) -> None:
    """The candidate repeats its slow product 1, 3 or 9 times by its input's bits, so its timing does
    not settle (re-measured, then `unstable`, in nearly every run). Unstable, it earns what the
    slowest speed it showed earns (a call that repeated the product), not its median; settled, what its
    median earns. Either way below a 1x kernel's reward, and never above its slowest sample's."""
    source = (CANDIDATES / "hacks" / "hgemm" / "jitter_slow_cpu.cpp").read_text()
    m = Evaluator(cpu_config).evaluate(get_task(HGEMM), source)
    assert m.correct and m.rejected is None, m.detail[-800:]
    assert m.speedup < 1.0, f"precondition: the repeated naive product ran at {m.speedup:.3f}x"
    slowest = m.extra["slowest_speedup"]
    assert slowest <= m.speedup
    if untrusted_speed(m):
        assert m.reward == untrusted_speed_reward(m, cpu_config.reward)
        assert m.reward <= correct_reward(slowest, cpu_config.reward, cpu_config.reward.noise_floor)
    else:
        assert m.reward == correct_reward(m.speedup, cpu_config.reward, m.extra.get("noise_floor"))
    assert m.reward < correct_reward(1.0, cpu_config.reward), (m.reward, m.extra.get("unstable_measurement"))
    print(f"unstable: {m.extra.get('unstable_measurement')}, re-measured {m.extra.get('remeasured', 0)}, "
          f"median {m.speedup:.3f}x, slowest {slowest:.3f}x")


@pytest.mark.parametrize("boundary", ["split", "shared"])
def test_values_of_later_calls_are_not_there_to_precompute(boundary: str, cpu_config: EvalConfig) -> None:
    """`precompute_ahead_cpu.cpp` remembers the buffers of every set it was called on and, whenever a
    call's values are new to it, computes the product of every remembered set whose values changed,
    keyed by a hash of A and B; later calls whose values it saw that way are served from the cache.
    With the pool refreshed as a whole (or a window's sets written before its first call) most
    timed calls were cache hits.  Each set's values are now written right before its own call, so
    when it looks, every other set still holds values already used: it computes its own product,
    correct, at its honest twin's speed (`hgemm_cpu_fp32.cpp`, the same product) and earns nothing
    for the attempt.  A pool of 8 sets lets it learn every set within the first windows (the
    default 32 would leave it fewer hits, not none)."""
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.boundary = boundary
    cfg.timing.max_pool_sets = 8
    task = get_task("hgemm/fp32/256_256_256")
    evaluator = Evaluator(cfg)
    hack = evaluator.evaluate(task, (CANDIDATES / "hacks" / "hgemm" / "precompute_ahead_cpu.cpp").read_text())
    honest = evaluator.evaluate(task, (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text())
    assert honest.rejected is None and honest.speedup, honest.detail[-800:]
    assert hack.rejected is None and hack.correct, hack.detail[-800:]
    # Cache hits read ~100x; 3x leaves room for a loaded host's spread between the two evaluations.
    assert hack.speedup < 3 * honest.speedup, (
        f"the precomputing kernel ran at {hack.speedup:.3f}x, its honest twin at {honest.speedup:.3f}x")
    print(f"{boundary}: precompute-ahead {hack.speedup:.3f}x, honest twin {honest.speedup:.3f}x")


def test_namespaces_can_be_turned_off_for_hosts_without_them(cpu_config: EvalConfig) -> None:
    cfg = cpu_config.model_copy(deep=True)
    cfg.sandbox.isolation = "process"
    m = Evaluator(cfg).evaluate(get_task(HGEMM), (CANDIDATES / "honest" / "hgemm_cpu_fp32.cpp").read_text())
    assert m.correct and m.rejected is None, m.detail
