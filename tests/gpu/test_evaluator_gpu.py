"""The cuda backend end to end: honest kernels pass (CUTLASS/CuTe sm_90a included) and every GPU
hgemm reward hack is rejected, through the whole evaluator.  Skipped without CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from rl_kernels.config import EvalConfig, load_config
from rl_kernels.evaluation.build import build_many
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.evaluation.sandbox import WATCH_EVERY_S, group_members
from rl_kernels.tasks import get_task

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
CANDIDATES = REPO / "tests" / "candidates"


HONEST = [
    ("honest/hgemm_cuda_fp32.cu", "hgemm/fp32/1024_1024_1024"),
    ("hgemm/wmma_fp32acc.cu", "hgemm/fp32/4096_4096_4096"),
    ("hgemm/cute_sm90.cu", "hgemm/fp32/4096_4096_4096"),
    ("hgemm/cutlass_device_api.cu", "hgemm/fp32/1024_1024_1024"),
]


# Hangs on the device, and their slow but honest control (hgemm/fp32/1024^3; tests/candidates/sandbox/).
HANGS_CUDA = ("hang_first_call_cuda.cu", "hang_at_call_cuda.cu")
# How late past its limit a hang's verdict may still come: the parent's poll, its kill, and the
# driver tearing down a context whose kernel still spins.  The limit itself comes from the config.
LATE_S = 2.0
# Remembers every set it was called on and precomputes the ones whose values changed (its honest
# twin: honest/hgemm_cuda_fp32.cu, the same product).
PRECOMPUTE_AHEAD_CUDA = "hacks/hgemm/precompute_ahead_cuda.cu"


def _cuda_hacks() -> list[dict]:
    data = yaml.safe_load((CANDIDATES / "hacks" / "manifest.yaml").read_text())["hacks"]
    return [e for e in data if e["backend"] == "cuda" and "task" in e]


@pytest.fixture(scope="module")
def cuda_config(tmp_path_factory: pytest.TempPathFactory) -> EvalConfig:
    """The H200 config on this device's arch, with every candidate of this module built up front in
    parallel (CUTLASS builds take tens of seconds each; the evaluations then hit the cache)."""
    cache = tmp_path_factory.mktemp("rlk-cuda-cache")
    major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    arch = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    cfg = load_config(REPO / "configs" / "h200.yaml",
                      [f"eval.build.cache_dir={cache}", f"eval.build.cuda_archs=[{arch}]"]).eval
    items = [(get_task(t), (CANDIDATES / p).read_text()) for p, t in HONEST]
    items += [(get_task(e["task"]), (CANDIDATES / "hacks" / e["file"]).read_text()) for e in _cuda_hacks()]
    items += [(get_task("hgemm/fp32/1024_1024_1024"), (CANDIDATES / "sandbox" / name).read_text())
              for name in ("illegal_address_cuda.cu", *HANGS_CUDA, "slow_honest_cuda.cu")]
    items.append((get_task("hgemm/fp32/1024_1024_1024"), (CANDIDATES / PRECOMPUTE_AHEAD_CUDA).read_text()))
    build_many(items, cfg, jobs=os.cpu_count() or 1)
    return cfg


@pytest.mark.parametrize("path, task_id", HONEST)
def test_honest_cuda_kernels_pass(path: str, task_id: str, cuda_config: EvalConfig) -> None:
    m = Evaluator(cuda_config).evaluate(get_task(task_id), (CANDIDATES / path).read_text())
    assert m.rejected is None, m.detail[-1500:]
    assert m.correct and m.samples >= 30 and m.sm_clock_mhz is not None
    assert m.baseline in cuda_config.baselines.hgemm
    launches = m.extra["launches"]    # the profiled call ran the candidate's own kernels, nothing else
    assert launches["own_kernels"] >= 1 and launches["foreign_kernels"] == 0, launches


@pytest.mark.parametrize("boundary", ["split", "shared"])
def test_launch_evidence_under_both_boundaries(boundary: str, cuda_config: EvalConfig) -> None:
    """A kernel registered but never launched passes the gate and the build; the profiled call
    refuses it in the runner (split) and in the worker (shared), and the honest tiled kernel passes."""
    cfg = cuda_config.model_copy(update={"sandbox": cuda_config.sandbox.model_copy(update={"boundary": boundary})})
    task = get_task("hgemm/fp32/256_256_256")
    idle = Evaluator(cfg).evaluate(task, (CANDIDATES / "hacks" / "trust" / "idle_kernel_cuda.cu").read_text())
    assert idle.rejected == "no_custom_kernel" and "no kernel of the candidate's own ran" in idle.detail, idle.detail
    honest = Evaluator(cfg).evaluate(task, (CANDIDATES / "honest" / "hgemm_cuda_fp32.cu").read_text())
    assert honest.rejected is None and honest.extra["launches"]["own_kernels"] == 1, honest.detail[-800:]


@pytest.mark.parametrize("entry", _cuda_hacks(), ids=lambda e: e["file"])
def test_cuda_hack_rejected(entry: dict, cuda_config: EvalConfig) -> None:
    m = Evaluator(cuda_config).evaluate(get_task(entry["task"]), (CANDIDATES / "hacks" / entry["file"]).read_text())
    if entry.get("inert") and m.rejected is None:
        return
    assert m.rejected in entry["expected"], f"{entry['file']}: {m.rejected} {m.detail[:500]}"
    if m.rejected == "async_escape":   # refused twice: the first refusal alone is not the verdict
        assert m.extra["refusal_remeasured"].startswith("async_escape"), m.extra


@pytest.mark.parametrize("margin", [2.0, 0.0])
def test_host_heavy_launches_stay_outside_the_timed_interval(margin: float, cuda_config: EvalConfig) -> None:
    """A side whose launch takes 0.5 ms on the host (torch.compile's guards can) before a ~10 us
    kernel: with the adaptive launch cover the events see the kernel; with a fixed ~100 us cover
    the GPU idles at the start event and the host time lands in the interval."""
    import random

    from rl_kernels.evaluation.timing import IntervalClock, Side

    x = torch.randn(1 << 20, device="cuda")

    def run(i: int) -> torch.Tensor:
        end = time.perf_counter() + 0.5e-3
        while time.perf_counter() < end:
            pass
        return torch.relu(x)

    cfg = cuda_config.timing.model_copy(update={"launch_cover_margin": margin})
    clock = IntervalClock("cuda", cfg, None, random.Random(0))
    side = Side(run=run)
    pending = [clock.enqueue(side, 0)[0] for _ in range(40)]
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in pending[10:])[len(pending[10:]) // 2]
    if margin:
        assert ms < 0.1, f"host launch time leaked into the interval: {ms:.3f} ms"
    else:
        assert ms > 0.3, f"control: a fixed cover should let the 0.5 ms host launch leak in ({ms:.3f} ms)"


def test_a_synchronising_call_does_not_grow_the_launch_cover(cuda_config: EvalConfig) -> None:
    """A call that ends in a device-wide synchronize (as CUTLASS entry points often do) waits for
    the spin queued before it: the cover must stay at its floor instead of growing to its cap."""
    import random

    from rl_kernels.evaluation.timing import IntervalClock, Side

    x = torch.randn(1 << 20, device="cuda")

    def run(i: int) -> torch.Tensor:
        y = torch.relu(x)
        torch.cuda.synchronize()
        return y

    clock = IntervalClock("cuda", cuda_config.timing, None, random.Random(0))
    side = Side(run=run)
    pending = [clock.enqueue(side, 0)[0] for _ in range(40)]
    torch.cuda.synchronize()
    assert clock.book(side).waits_for_the_device
    assert clock.cover_cycles(side) == cuda_config.timing.launch_cover_cycles
    assert max(host for host in clock.book(side).recent) < 1.0, list(clock.book(side).recent)
    ms = sorted(a.elapsed_time(b) for a, b in pending[10:])[len(pending[10:]) // 2]
    assert ms < 0.5, ms


def test_a_compiled_baseline_is_kept_between_evaluations(tmp_path: Path, cuda_config: EvalConfig) -> None:
    """The baseline measurement compiles torch.compile's baseline and keeps it; the evaluation
    after it loads it (inductor's FX-graph cache hits, no miss), and its warm phase (the baseline's
    first call, where the compile happens) is shorter than one that compiles afresh.  The whole
    evaluation's seconds are not compared: adaptive timing rounds vary them by more than the compile
    saves now that a forked worker has torch.compile's modules imported and warmed.  No worker makes
    its problem ahead here: one that did would have compiled (or loaded) the baseline before its job."""
    task = get_task("builtin/softmax")
    got = {}
    for keep in (True, False):
        cfg = cuda_config.model_copy(update={
            "build": cuda_config.build.model_copy(update={"cache_dir": tmp_path / str(keep)}),
            "baselines": cuda_config.baselines.model_copy(update={"module": ["compile"], "keep_compiled": keep}),
            "sandbox": cuda_config.sandbox.model_copy(update={"prestart_problem": False})})
        ev = Evaluator(cfg)
        build = ev.build(task, task.seeds["cuda"])      # built and measured first: only the evaluation is timed
        ev.best_baseline(task)
        got[keep] = ev.evaluate(task, task.seeds["cuda"], build)
        assert got[keep].correct, got[keep].detail
        assert got[keep].extra["launches"]["own_kernels"] >= 1, got[keep].extra["launches"]
    kept, fresh = got[True].extra["baseline_compile"], got[False].extra["baseline_compile"]
    assert kept.get("fxgraph_cache_hit", 0) > 0 and kept.get("fxgraph_cache_miss", 0) == 0, kept
    assert fresh.get("fxgraph_cache_miss", 0) > 0, fresh
    assert any(p.is_file() for p in (tmp_path / "True" / "compiled-baselines").rglob("*"))
    assert not (tmp_path / "False" / "compiled-baselines").exists()
    warm = {keep: got[keep].extra["phase_s"]["warm"] for keep in got}
    print(f"warm phase: kept {warm[True]:.2f} s, fresh {warm[False]:.2f} s")   # shown with -rA
    assert warm[True] < warm[False], warm


def test_a_worker_that_made_the_problem_ahead_judges_as_one_that_did_not(cuda_config: EvalConfig) -> None:
    """softmax against its compiled baseline, the second evaluation in a worker started beside the
    first: with `prestart_problem` that worker made softmax's problem (the compiled baseline loaded
    from the kept caches in its own compile dir) before its job, and its job's warm phase is the
    shorter; the verdicts agree, and so do the speedups within the evaluations' own noise."""
    cfg = cuda_config.model_copy(update={"baselines": cuda_config.baselines.model_copy(update={"module": ["compile"]})})
    task = get_task("builtin/softmax")
    got = {}
    for ahead in (False, True):
        ev = Evaluator(cfg.model_copy(update={"sandbox": cfg.sandbox.model_copy(update={"prestart_problem": ahead})}))
        build = ev.build(task, task.seeds["cuda"])
        ev.best_baseline(task)
        ev.evaluate(task, task.seeds["cuda"], build)           # leaves workers started beside it
        got[ahead] = ev.evaluate(task, task.seeds["cuda"], build)
        ev.close()
        assert got[ahead].correct and got[ahead].extra["workers"] == ["standby"], (got[ahead].extra, got[ahead].detail)
    assert "problem_ahead" not in got[False].extra
    made = got[True].extra["problem_ahead"]
    assert made["task"] == task.id and made["error"] is None, made
    warm = {ahead: got[ahead].extra["phase_s"]["warm"] for ahead in got}
    speed = {ahead: got[ahead].speedup for ahead in got}
    print(f"warm phase: made ahead {warm[True]:.2f} s, not {warm[False]:.2f} s; speedups {speed}")   # shown with -rA
    assert warm[True] < warm[False], warm
    noise = max(got[True].noise, got[False].noise, 0.05)
    assert abs(speed[True] / speed[False] - 1) < 3 * noise, (speed, noise)


@pytest.mark.parametrize("device_ahead", [False, True])
def test_a_worker_started_as_a_new_process_judges_as_a_forked_one(cuda_config: EvalConfig, device_ahead: bool) -> None:
    """`eval.sandbox.fork_server=false` is the fallback for hosts where forked workers' view of the
    device is broken: each candidate then gets a new process, started when its job arrives
    (`prestart` off) or ahead of it, with or without its CUDA contexts made before the job.  The
    same honest kernel passes there as in a forked worker, with the same speedup within noise."""
    task = get_task("hgemm/fp32/1024_1024_1024")
    source = (CANDIDATES / "honest" / "hgemm_cuda_fp32.cu").read_text()
    forked = Evaluator(cuda_config).evaluate(task, source)
    assert forked.correct, forked.detail[-1500:]
    for prestart in ("off", "after_job"):
        sb = cuda_config.sandbox.model_copy(update={"fork_server": False, "prestart": prestart,
                                                    "prestart_device": device_ahead})
        ev = Evaluator(cuda_config.model_copy(update={"sandbox": sb}))
        got = [ev.evaluate(task, source) for _ in range(2)]      # the second in a worker started after the first
        ev.close()
        for m in got:
            assert m.rejected is None and m.correct, (prestart, m.detail[-1500:])
            assert m.extra["forked"] is False, m.extra
            noise = max(m.noise, forked.noise, 0.05)
            assert abs(m.speedup / forked.speedup - 1) < 3 * noise, (prestart, m.speedup, forked.speedup, noise)


def test_a_kernel_with_a_cuda_guard_builds_against_torch(cuda_config: EvalConfig) -> None:
    """c10/cuda/CUDAGuard.h is not in the shim: the build falls back to torch's headers and the
    kernel is evaluated like any other."""
    m = Evaluator(cuda_config).evaluate(get_task("hgemm/fp32/512_512_512"),
                                        (CANDIDATES / "honest" / "hgemm_cuda_guard.cu").read_text())
    assert m.rejected is None, m.detail[-1500:]
    assert m.correct and m.extra["build_path"] == "torch"


def test_a_module_task_with_a_compiled_baseline_runs_in_a_forked_worker(cuda_config: EvalConfig) -> None:
    """On a host with a visible device the fork server imports torch.compile's modules but compiles
    nothing (a compile there initialises the CUDA driver, and a server that did is given up): the
    worker is forked, and the compiled baseline is compiled in it."""
    cfg = cuda_config.model_copy(update={"baselines": cuda_config.baselines.model_copy(update={"module": ["compile"]})})
    evaluator = Evaluator(cfg)
    task = get_task("builtin/softmax")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)      # a server given up warns
        m = evaluator.evaluate(task, task.seeds["cuda"])
    assert m.correct, m.detail[-800:]
    assert m.extra["forked"], "the fork server was given up on this host"
    evaluator.close()


def test_a_module_cuda_file_builds_against_the_slim_headers_or_falls_back(cuda_config: EvalConfig,
                                                                         tmp_path: Path) -> None:
    """The softmax seed's CUDA file compiles against the slim torch headers and is correct; the same
    seed asking for the device's properties (a declaration the slim headers lack) is built again
    against torch's own headers and is correct too."""
    cfg = cuda_config.model_copy(update={"build": cuda_config.build.model_copy(update={"cache_dir": tmp_path}),
                                         "baselines": cuda_config.baselines.model_copy(update={"module": ["eager"]})})
    evaluator = Evaluator(cfg)
    task = get_task("builtin/softmax")
    seed = task.seeds["cuda"]
    wider = seed.replace('TORCH_CHECK(x.dim() >= 1', 'TORCH_CHECK(at::cuda::getCurrentDeviceProperties()->warpSize == 32);\n'
                                                   '    TORCH_CHECK(x.dim() >= 1', 1)
    assert wider != seed
    for source, path in ((seed, "slim"), (wider, "torch")):
        m = evaluator.evaluate(task, source)
        assert m.correct, m.detail[-1500:]
        assert m.extra["build_path"] == path, m.extra["build_path"]
    evaluator.close()


def _free_after(settle_s: float = 1.0) -> int:
    time.sleep(settle_s)
    return torch.cuda.mem_get_info()[0]


def _context_bytes() -> int:
    """What one process's CUDA context holds on this device (a control process that creates one)."""
    control = subprocess.Popen([sys.executable, "-c", "import torch, sys; torch.zeros(1, device='cuda'); "
                                "print('up', flush=True); sys.stdin.read()"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert control.stdout.readline().strip() == "up"
    with_context = _free_after()
    control.communicate("", timeout=60)
    return _free_after() - with_context


@pytest.mark.parametrize("ahead", [False, True], ids=["no_device_ahead", "device_ahead"])
def test_a_started_worker_holds_cuda_contexts_before_its_job_only_with_prestart_device(
        cuda_config: EvalConfig, ahead: bool) -> None:
    """The worker started for the next job (and the runner it forked), forked from the fork server:
    without `prestart_device` it holds no CUDA context while it waits, and neither does the server
    (ending them frees no device memory; an import may open the driver's files, nothing is
    allocated); with it, the worker and its runner each hold theirs (ending them frees about two
    contexts' memory).  Either way the job a started worker serves is correct."""
    cfg = cuda_config.model_copy(update={"sandbox": cuda_config.sandbox.model_copy(update={"prestart_device": ahead})})
    evaluator = Evaluator(cfg)
    honest = (CANDIDATES / "honest" / "hgemm_cuda_fp32.cu").read_text()
    task = get_task("hgemm/fp32/1024_1024_1024")
    m = evaluator.evaluate(task, honest)
    assert m.correct, m.detail[-800:]
    assert m.extra["forked"], "the fork server was given up on this host (see the warning)"
    again = evaluator.evaluate(task, honest)              # served by the worker started beside the first job
    assert again.correct and again.extra["workers"][0] == "standby", (again.extra, again.detail[-800:])
    worker = evaluator.standby.held
    assert worker is not None and worker.wait_ready(120)
    pgid = worker.proc.pid
    assert len(group_members(pgid)) >= 2, group_members(pgid)       # the worker and its runner (and the confinement's stage)
    held = _free_after()
    evaluator.close()
    deadline = time.monotonic() + 30
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_members(pgid), "the started worker outlived its evaluator"
    freed = _free_after() - held
    context_bytes = _context_bytes()
    assert context_bytes > 100 << 20, f"control: a CUDA context should hold >100 MiB, freed {context_bytes >> 20} MiB"
    if ahead:
        assert freed > 1.5 * context_bytes, (f"ending the started worker freed {freed >> 20} MiB; two contexts "
                                             f"hold ~{2 * context_bytes >> 20} MiB")
    else:
        assert freed < 32 << 20, f"ending the started worker freed {freed >> 20} MiB of device memory"


def test_a_candidate_that_corrupts_its_context_leaves_the_next_one_untouched(cuda_config: EvalConfig) -> None:
    """An illegal address poisons its process's CUDA context for good; the next evaluation runs in
    the worker started beside it (whose own contexts, made ahead under the default
    `prestart_device`, are apart from the poisoned one) and passes."""
    evaluator = Evaluator(cuda_config)
    task = get_task("hgemm/fp32/1024_1024_1024")
    bad = evaluator.evaluate(task, (CANDIDATES / "sandbox" / "illegal_address_cuda.cu").read_text())
    assert bad.rejected in ("illegal_memory_access", "crash"), (bad.rejected, bad.detail[-800:])
    good = evaluator.evaluate(task, (CANDIDATES / "honest" / "hgemm_cuda_fp32.cu").read_text())
    assert good.correct, good.detail[-800:]
    assert good.extra["workers"][0] == "standby"
    evaluator.close()


@pytest.mark.parametrize("name, phase, boundary", [("hang_first_call_cuda.cu", "correctness", "split"),
                                                   ("hang_at_call_cuda.cu", "timing", "split"),
                                                   ("hang_at_call_cuda.cu", "timing", "shared")])
def test_a_hang_on_the_device_is_reported_once_the_calls_in_flight_should_have_ended(
        name: str, phase: str, boundary: str, cuda_config: EvalConfig) -> None:
    """A kernel that never ends, at the first call (one call in flight) or from the 40th on (a
    runner window of `window_calls`, or under the shared boundary a queued batch of `sync_every`),
    is `hung` the floor after those calls should have ended at the slowest speed still measured;
    the next evaluation on the same evaluator runs on a working device."""
    cfg = cuda_config.model_copy(deep=True)
    cfg.sandbox.boundary = boundary
    cfg.sandbox.timeout_s = 120
    evaluator = Evaluator(cfg)
    task = get_task("hgemm/fp32/1024_1024_1024")
    m = evaluator.evaluate(task, (CANDIDATES / "sandbox" / name).read_text())
    assert m.rejected == "hung" and f"in phase {phase}" in m.detail, (m.rejected, m.detail[-800:])
    in_flight = 1 if phase == "correctness" else cfg.timing.window_calls if boundary == "split" else cfg.timing.sync_every
    allowed = cfg.sandbox.hang_floor_s + in_flight * cfg.sandbox.hang_factor * m.baselines_ms[m.baseline] / 1e3
    hang = m.extra["hang"]
    assert hang["calls"] == in_flight and hang["limit_s"] == pytest.approx(allowed, abs=1e-3), hang
    assert allowed < hang["silent_s"] <= allowed + WATCH_EVERY_S + LATE_S, hang
    assert m.eval_seconds < cfg.sandbox.timeout_s
    good = evaluator.evaluate(task, (CANDIDATES / "honest" / "hgemm_cuda_fp32.cu").read_text())
    assert good.correct, good.detail[-800:]
    evaluator.close()


@pytest.mark.parametrize("boundary", ["split", "shared"])
def test_a_slow_honest_kernel_on_the_device_is_measured_not_killed(boundary: str, cuda_config: EvalConfig) -> None:
    """The tiled honest kernel launched twice per call (~0.02x of cuBLASLt): measured correct at its
    own speed under either boundary, never reported hung."""
    cfg = cuda_config.model_copy(deep=True)
    cfg.sandbox.boundary = boundary
    m = Evaluator(cfg).evaluate(get_task("hgemm/fp32/1024_1024_1024"),
                                (CANDIDATES / "sandbox" / "slow_honest_cuda.cu").read_text())
    assert m.rejected is None and m.correct, m.detail[-800:]
    assert "hang" not in m.extra
    assert 0.005 <= m.speedup <= 0.05, m.speedup


@pytest.mark.parametrize("boundary", ["split", "shared"])
def test_values_of_later_calls_are_not_on_the_device_to_precompute(boundary: str, cuda_config: EvalConfig) -> None:
    """The cuda twin of test_trust_boundary_cpu's precompute-ahead test: each set's values reach
    the device memory the candidate can read only right before its own call (split: the judge's
    copy, ordered after the runner's previous call and before this one by two inter-process
    events; shared: in stream order), so hashing every set it saw finds no later call's values and
    the kernel runs at its honest twin's speed, correct.  A pool of 8 sets lets it learn every set
    within the first windows."""
    cfg = cuda_config.model_copy(deep=True)
    cfg.sandbox.boundary = boundary
    cfg.timing.max_pool_sets = 8
    task = get_task("hgemm/fp32/1024_1024_1024")
    evaluator = Evaluator(cfg)
    hack = evaluator.evaluate(task, (CANDIDATES / PRECOMPUTE_AHEAD_CUDA).read_text())
    honest = evaluator.evaluate(task, (CANDIDATES / "honest" / "hgemm_cuda_fp32.cu").read_text())
    assert honest.rejected is None and honest.speedup, honest.detail[-800:]
    assert hack.rejected is None and hack.correct, hack.detail[-800:]
    # Cache hits read ~100x; 3x leaves room for a loaded host's spread between the two evaluations.
    assert hack.speedup < 3 * honest.speedup, (
        f"the precomputing kernel ran at {hack.speedup:.3f}x, its honest twin at {honest.speedup:.3f}x")
    print(f"{boundary}: precompute-ahead {hack.speedup:.3f}x, honest twin {honest.speedup:.3f}x")
