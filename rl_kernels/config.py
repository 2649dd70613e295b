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
    cache_dir: Path = Field(default_factory=default_cache_dir)
    cuda_archs: list[str] = Field(default_factory=lambda: ["sm_90a"])
    nvcc: str = "nvcc"
    cxx: str = "c++"
    cxx_flags: list[str] = Field(default_factory=lambda: ["-O3", "-std=c++17", "-fPIC"])
    cpu_arch_flags: list[str] = Field(default_factory=lambda: ["-march=native"])
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
        ]
    )
    timeout_s: float = Field(300.0, gt=0)
    log_max_chars: int = Field(20000, gt=0)
    embed_ptx: bool = Field(False, description=(
        "Also embed PTX for the newest of cuda_archs, so the artifact runs (JIT-compiled at load) on "
        "newer GPUs than it was built for; costs build time and a first-load JIT, and the timing is "
        "then of the driver's compilation, not of SASS tuned for that arch"))
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
    timeout_s: float = Field(180.0, gt=0)
    memory_limit_mb: int = Field(16384, gt=0)
    scratch_root: Path | None = None
    keep_scratch: bool = False
    isolation: Isolation = Field("namespaces", description=(
        "How an evaluation subprocess is confined: namespaces (no network, read-only host, secrets "
        "hidden, no process survives it) or process (for hosts without user namespaces; weaker)"))
    boundary: Literal["split", "shared"] = Field("split", description=(
        "Where the candidate runs: split (a runner process; the judge keeps inputs, references, baseline, "
        "checks and verdict out of its reach; two CUDA contexts) or shared (the worker itself, one process)"))
    hang_factor: float = Field(1000.0, gt=0, description=(
        "A candidate call may take this many times the baseline's median before the watchdog calls it "
        "hung (CUDA-L1's rule is 1000x); lower kills slow-but-honest kernels, higher wastes timer time"))
    hang_floor_s: float = Field(10.0, gt=0, description=(
        "Seconds of silence the watchdog always allows once the candidate is loaded (its __init__, a "
        "batch of queued calls); the floor of how fast a hang is reported"))
    keep_freed_memory: bool = Field(True, description=(
        "The worker's glibc keeps freed memory for reuse (no mmap per large allocation, no trimming): "
        "a call's temporaries then cost what they cost in a long-running process, instead of a "
        "page-fault storm that one worker process got and the next did not (eager rmsnorm on cpu: "
        "3.5 or 9 ms by process); false times the allocator's default behaviour"))
    prestart: Literal["off", "after_job", "beside_job"] = Field("beside_job", description=(
        "When the worker for the next job starts (process, Python, torch, the evaluator's imports and "
        "the runner; it then waits for its job without touching the device): beside_job as each job "
        "starts (stopped during its timed phases; back to back it hides the start-up where the host "
        "has cores to spare), after_job when a job ends (ready if the timer waits for candidates, "
        "never beside a running job: for hosts with a core or two), off when its job arrives. One "
        "process per candidate either way; an idle started worker holds ~0.3-1 GB"))
    prestart_workers: int = Field(1, ge=1, le=16, description=(
        "How many workers are kept started ahead (with prestart on); each job takes the oldest. More "
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
    num_input_sets: int = Field(5, ge=5)
    distributions: list[Literal["normal", "uniform", "heavy_tailed", "mixed_sign"]] = Field(
        default_factory=lambda: ["normal", "uniform", "heavy_tailed", "mixed_sign"]
    )
    atol: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
    )
    rtol: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
    )
    # Extra absolute slack as a multiple of the output's RMS: a sum of large terms that cancels to a
    # small value carries the rounding error of the terms, not of the result (matmul, reductions).
    atol_rms_multiple: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
    )
    relnorm: dict[str, float] = Field(
        default_factory=lambda: {"float64": 1e-9, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}
    )
    # hgemm: fp32-accumulate tasks allow output rounding only; fp16-accumulate tasks also allow
    # per-add rounding that grows like sqrt(K).  Both are relative-norm bounds.
    hgemm_fp32_acc_relnorm: float = Field(1.5e-3, gt=0)
    hgemm_fp16_acc_relnorm_per_sqrt_k: float = Field(4e-4, gt=0)
    recheck_timed_calls: int = Field(3, ge=1)
    allowed_torch_ops: list[str] = Field(
        default_factory=lambda: [
            "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
            "zeros_like", "new_zeros", "fill_", "zero_", "view", "_unsafe_view", "reshape",
            "_reshape_alias", "as_strided", "contiguous", "detach", "alias", "size", "stride",
            "t", "transpose", "permute", "expand", "squeeze", "unsqueeze", "select", "slice",
            "lift_fresh", "_to_copy", "copy_", "clone", "resize_",
        ]
    )

    @model_validator(mode="after")
    def _tolerances_cover_dtypes(self) -> "CorrectnessConfig":
        for name in ("atol", "rtol", "relnorm"):
            missing = {"float32", "float16"} - set(getattr(self, name))
            if missing:
                raise ValueError(f"correctness.{name} needs entries for {sorted(missing)}")
        return self


class TimingConfig(_Strict):
    mode: TimingMode = "kernel"
    warmup: int = Field(5, ge=0)
    samples: int = Field(30, ge=30)
    pool_l2_multiple: float = Field(3.0, ge=1.0)
    max_pool_sets: int = Field(32, ge=2)
    # cuda: sets used between two pool refreshes (memory permitting), so the fresh-value writes come
    # in bursts between runs of this many calls instead of between every two (the GPU's clocks
    # follow its duty cycle). The cpu pool only needs to defeat the caches.
    cuda_min_pool_sets: int = Field(16, ge=2)
    max_pool_bytes: int = Field(8 * 1024**3, gt=0)
    cpu_cache_bytes: int = Field(64 * 1024 * 1024, gt=0)
    cpu_cores: list[int] | None = None
    flush_l2: bool = True
    launch_cover_cycles: int = Field(200_000, ge=0)   # GPU spin before the start event (~100 us)
    launch_cover_margin: float = Field(2.0, ge=0.0, description=(
        "cuda kernel mode: the spin before each start event lasts at least this many times the side's "
        "slowest host launch so far (0: fixed launch_cover_cycles); lower lets host-heavy launches "
        "(torch.compile) leak host latency into their times, higher costs GPU time per call"))
    launch_cover_max_cycles: int = Field(20_000_000, ge=0, description=(
        "cuda kernel mode: cap of that adaptive spin in GPU cycles (~10 ms), so one host stall cannot "
        "make every later call wait"))
    # kernel mode on cuda: timed calls queued back to back, one host sync per this many calls.
    # 1 = sync after every call (the GPU idles while the host works between samples, which made
    # 512^3..2048^3 GEMMs 2-15% faster than triton's do_bench on the H200; docs/EVALUATOR.md).
    sync_every: int = Field(64, ge=1)
    # Timed inputs: one distribution for candidate and baseline alike (correctness covers all four);
    # the data's bit patterns change the GPU's power draw and clocks, so mixing them adds noise.
    input_distribution: Literal["normal", "uniform", "heavy_tailed", "mixed_sign"] = "normal"
    window_calls: int = Field(10, ge=1, description=(
        "split boundary: calls per side per window (queued back to back, one sync); sides alternate "
        "by window in random order: larger keeps the GPU's load steadier, smaller interleaves finer"))
    clock_gap_factor: float = Field(3.0, ge=1.0, description=(
        "split boundary: per call, a runner window may leave this many times the baseline's unexplained "
        "time unexplained by its events (plus clock_gap_ms, one baseline call and twice the judge-timed "
        "output copy) before `timer_patched`; "
        "lower catches smaller clock forgeries, higher spares host-heavy honest candidates"))
    clock_gap_ms: float = Field(0.5, ge=0.0, description=(
        "split boundary: fixed per-call slack (ms) of that check, for messages and output copies"))
    sync_guard_samples: int = Field(5, ge=1)
    sync_guard_tolerance_us: float = Field(20.0, ge=0)
    sync_guard_tolerance_rel: float = Field(0.25, ge=0)
    server_qps: float = Field(200.0, gt=0)
    server_max_gap_ms: float = Field(50.0, gt=0)
    max_seconds: float = Field(60.0, gt=0)


class RooflineConfig(_Strict):
    """Peak rates of the timed device; a measurement beyond them is physically impossible."""

    peak_tflops_fp16: float | None = Field(None, gt=0)
    peak_tflops_fp32: float | None = Field(None, gt=0)
    peak_gbps: float | None = Field(None, gt=0)
    margin: float = Field(0.10, ge=0, lt=1)


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
        "earns the correct-kernel reward without a speedup term. Lower demands steadier timers (more "
        "re-measurements), higher lets timing noise through to the advantages"))
    # Opt-in shaping for training small models (0 = off, DESIGN.md's pure reward): a failing answer
    # whose code block parsed earns format_reward, one that also compiled earns compile_reward.
    # Answers rejected as reward hacks always get fail_reward; a correct kernel always beats both.
    format_reward: float = 0.0
    compile_reward: float = 0.0

    @model_validator(mode="after")
    def _ordering(self) -> "RewardConfig":
        if self.min_correct_reward <= self.fail_reward:
            raise ValueError("reward.min_correct_reward must exceed reward.fail_reward: a correct "
                             "kernel must always beat a failing one")
        if not self.fail_reward <= self.format_reward <= self.compile_reward < self.min_correct_reward:
            raise ValueError("reward shaping needs fail_reward <= format_reward <= compile_reward < "
                             f"min_correct_reward (got {self.fail_reward}, {self.format_reward}, "
                             f"{self.compile_reward}, {self.min_correct_reward})")
        return self


class BaselineConfig(_Strict):
    module: list[Literal["eager", "compile"]] = Field(default_factory=lambda: ["eager", "compile"])
    hgemm: list[Literal["torch_matmul", "cublas", "cublaslt_heuristic", "cublaslt_autotuned"]] = Field(
        default_factory=lambda: ["torch_matmul", "cublas", "cublaslt_heuristic", "cublaslt_autotuned"]
    )
    reward_against: Literal["best", "first"] = "best"
    cublaslt_workspace_mb: int = Field(32, gt=0)
    cublaslt_autotune_algos: int = Field(16, gt=0)
    cache_ttl_s: float = Field(3600.0, gt=0)
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
    backend: Backend = "cpu"
    build: BuildConfig = Field(default_factory=BuildConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    correctness: CorrectnessConfig = Field(default_factory=CorrectnessConfig)
    timing: TimingConfig = Field(default_factory=TimingConfig)
    roofline: RooflineConfig = Field(default_factory=RooflineConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    baselines: BaselineConfig = Field(default_factory=BaselineConfig)
    launches: LaunchEvidenceConfig = Field(default_factory=LaunchEvidenceConfig)
    exclude_degenerate: bool = True
    allow_torch_rewrites: bool = False
    shared_device: bool = False
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

    backend: Literal["hf", "vllm"] = "hf"
    model: str = "SmolLM2-135M-Instruct"
    device: str = "cpu"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    group_size: int = Field(8, ge=2)           # G completions per prompt (GRPO needs >= 2)
    max_new_tokens: int = Field(1024, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    batch_size: int = Field(8, ge=1)           # sequences per generate() call on one generator
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
    vllm: VLLMSettings = Field(default_factory=VLLMSettings)

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
        "compile workers, one core and one build at a time each; ~3 per hf generator for hgemm builds, ~13 for module builds"))
    num_timers: int = Field(1, ge=1, description=(
        "timers, one per GPU (cuda) or core set (cpu); more evaluate more candidates at once"))
    compiler_max_restarts: int = Field(3, ge=0, description="times Ray restarts a dead compile worker")
    timer_max_restarts: int = Field(3, ge=0, description="times Ray restarts a dead timer")
    generator_max_restarts: int = Field(3, ge=0, description="times Ray restarts a dead generator")
    actor_retries: int = Field(1, ge=0, description=(
        "times in-flight work is retried after its actor died; more rescue more work, each retry costs its latency again"))
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

    max_groups: int | None = Field(16, ge=1)   # stop after this many groups (None: time budget only)
    time_budget_s: float | None = Field(None, gt=0)
    max_staleness: int = Field(2, ge=0)
    batch_groups: int = Field(4, ge=1)         # groups per learner batch (the staleness manager's unit)
    filter_zero_variance: bool = True
    # Identical kernels within a group are built and timed once and share the measurement: the same
    # code then gets the same reward (separate timings would differ by noise alone, and GRPO would
    # turn that noise into advantages), and the evaluations are not repeated.
    dedupe_group_sources: bool = True
    tasks: list[str] | None = None             # task ids from the suite; None = every task
    seed: int = 0
    slot_poll_s: float = Field(0.5, gt=0)      # how often a producer asks again for a slot

    @model_validator(mode="after")
    def _stops(self) -> "RolloutConfig":
        if self.max_groups is None and self.time_budget_s is None:
            raise ValueError("rollout needs max_groups or time_budget_s, or it never ends")
        return self


class MetricsConfig(_Strict):
    """One sink: W&B (offline unless a project and a key are configured) and run_dir/metrics.jsonl."""

    wandb: bool = True
    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    interval_s: float = Field(10.0, gt=0)      # how often the driver logs pipeline gauges


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

    device: str = "cpu"
    num_gpus: float = Field(0.0, ge=0)          # Ray GPUs reserved for the learner actor
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"   # auto: fp32 on cpu, bf16 on cuda
    zero_stage: int = Field(2, ge=0, le=3)
    lora: LoraSettings = Field(default_factory=LoraSettings)
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    lr_warmup_steps: int = Field(0, ge=0)
    lr_decay_steps: int | None = Field(None, ge=1)   # linear/cosine horizon; None: train.max_steps
    lr_min_ratio: float = Field(0.1, ge=0, le=1)     # floor of the decay, as a fraction of lr
    max_grad_norm: float = Field(1.0, gt=0)
    micro_batch_size: int = Field(4, ge=1)           # sequences per forward/backward
    epochs_per_batch: int = Field(1, ge=1)           # optimizer steps on one batch (PPO epochs)
    gradient_checkpointing: bool = False
    publish_every: int = Field(1, ge=1)              # learner steps per published policy version
    seed: int = 0


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
        "where before_train keeps warm-start runs by content key; default ~/.cache/rl_kernels/warm-start"))


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
        "the rounds' learning rate; unset: learner.lr; higher fits the kept samples faster and narrows the policy sooner"))
    batch_size: int = Field(8, ge=1, description="samples per optimizer step (micro-batched by learner.micro_batch_size)")
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


class Config(_Strict):
    run_dir: Path = Path("runs/default")
    suite: str = "builtin"
    eval: EvalConfig = Field(default_factory=EvalConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    prompts: PromptConfig = Field(default_factory=PromptConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    sft: SftConfig = Field(default_factory=SftConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)
    selftrain: SelfTrainConfig = Field(default_factory=SelfTrainConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)

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
