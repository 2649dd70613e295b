"""The evaluator: static gate -> build -> sandboxed correctness + interleaved timing -> reward.

`Evaluator.evaluate(task, source)` returns a `Measurement` whatever happens; every failure carries
a reason code.  Baseline timings are measured once per (task, device, mode), cached on disk to pick
the strongest baseline, and that baseline is re-measured interleaved with every candidate whose
speedup is rewarded (same process, same device, same session).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import math
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from rl_kernels.archive import passed_every_gate
from rl_kernels.config import EvalConfig
from rl_kernels.evaluation import confine, sandbox
from rl_kernels.evaluation.baseline_record import BaselineRecord
from rl_kernels.evaluation.compile_cache import KeptCompile
from rl_kernels.evaluation.build import build_candidate, runnable_arch
from rl_kernels.evaluation.device import DeviceIdentity, device_lock, identify
from rl_kernels.evaluation.guards import static_check
from rl_kernels.evaluation.launches import dispatch_audit_wanted, launch_evidence_wanted
from rl_kernels.evaluation.reasons import CLOCK_GAP, Reason
from rl_kernels.evaluation.reward import earned_correct_reward, measurement_reward, noise_floor, untrusted_speed
from rl_kernels.evaluation.roofline import min_time_ms
from rl_kernels.evaluation.standby import Standby
from rl_kernels.evaluation.timing import median, rel_spread
from rl_kernels.host_share import host_share
from rl_kernels.types import Build, Measurement, Task


# The installed torch, part of a kept compile's key (read once: the evaluator itself never imports torch).
_TORCH_VERSION = importlib.metadata.version("torch")


def task_to_json(task: Task) -> dict[str, Any]:
    return {"id": task.id, "kind": task.kind, "source": task.source,
            "hgemm": asdict(task.hgemm) if task.hgemm else None, "allow_torch_ops": task.allow_torch_ops}


def _task_digest(task: Task) -> str:
    return hashlib.sha256(json.dumps(task_to_json(task), sort_keys=True).encode()).hexdigest()[:16]


class BaselineError(RuntimeError):
    """No baseline could be measured for a task; the message carries each baseline's error."""


class Evaluator:
    def __init__(self, cfg: EvalConfig):
        self.cfg = cfg
        self.device: DeviceIdentity = identify(cfg)
        self.cache_dir = Path(cfg.build.cache_dir)
        self.host = host_share(cfg)
        self._cublas_library: str | None = None
        if cfg.sandbox.isolation == "namespaces":
            confine.probe()   # fail at start-up, naming the missing layer, not on every candidate
        self.standby = Standby(cfg.sandbox.prestart != "off", cfg.sandbox.prestart_ready_s, cfg.sandbox.prestart_workers,
                               cfg.sandbox.fork_server)
        # Whether workers import the audit's and the profiler's tools ahead: from the first job that
        # uses them on (a worker started for the next job cannot know which task it will get).
        self._dispatch_tools = False

    def close(self) -> None:
        """Ends the workers started for next jobs that will not come and the fork servers (also done
        when the evaluator is garbage-collected or the process exits)."""
        self.standby.close()

    @contextlib.contextmanager
    def _holding_device(self) -> Iterator[float]:
        """The device alone (no other timer on it) and, with `eval.quiet_host`, the host alone (the
        generator, learner and builds pause); yields the seconds waited for the host."""
        with device_lock(self.device, self.cfg):
            if self.host is None:
                yield 0.0
            else:
                with self.host.exclusive() as waited:
                    yield waited

    def _run_job(self, job: dict[str, Any], artifact: bytes | None, artifact_name: str,
                 kept: KeptCompile | None) -> tuple[sandbox.SandboxResult, float]:
        """Runs one job holding the device (and the host), in the worker started ahead for it when
        there is a usable one; the next job's worker starts beside it (stopped during this job's
        timed phases) or after it (`sandbox.prestart`); returns the result and the seconds waited
        for the host."""
        self._dispatch_tools = self._dispatch_tools or self._uses_dispatch_tools(job)
        spec = sandbox.WorkerSpec(self.cfg.backend, self.cfg.sandbox, self._threads(), tuple(self._readable(job)),
                                  tuple(self._hidden()), kept.workdir if kept else None,
                                  warm_compile=self._compiles_baseline(job),
                                  dispatch_tools=self._dispatch_tools,
                                  device_ahead=self.cfg.backend == "cuda" and self.cfg.sandbox.prestart_device)
        worker, why = self.standby.take(spec, job["task"]["id"])
        prime = self._prime(job, spec, kept)
        beside = self.cfg.sandbox.prestart == "beside_job"
        if beside:
            self.standby.refill(spec, prime)
        with self._holding_device() as host_wait_s:
            res = sandbox.run_job(job, artifact, artifact_name, spec, kept, worker,
                                  beside=self.standby.workers if beside else (),
                                  start=self.standby.start)
        if not beside:
            self.standby.refill(spec, prime)     # after_job: outside the locks, once nothing of this job runs
        if worker is None and why != "none":
            res.worker = f"fresh (the started worker: {why})"
        return res, host_wait_s

    def _prime(self, job: dict[str, Any], spec: sandbox.WorkerSpec, kept: KeptCompile | None) -> sandbox.Prime | None:
        """What the next jobs' workers make ahead (`eval.sandbox.prestart_problem`): this job's task with
        the baselines it runs, the likeliest next job.  None where a worker has no compile dir of its
        own to load a compiled baseline from (isolation process, see `sandbox.StartedWorker`), and on
        cuda without `prestart_device` (a worker then touches the device only once its job is there)."""
        sb = self.cfg.sandbox
        if not sb.prestart_problem or (kept is not None and sb.isolation != "namespaces"):
            return None
        if self.cfg.backend == "cuda" and not sb.prestart_device:
            return None
        fields = {k: job[k] for k in ("task", "backend", "config", "cublas_library") if k in job}
        baselines = job.get("baselines") or [job["baseline"]]
        return sandbox.Prime(job={**fields, "baselines": list(baselines)}, store=kept.store if kept else None)

    def _compiles_baseline(self, job: dict[str, Any]) -> bool:
        """Whether the job's worker may compile a baseline with torch.compile (a module task with
        `compile` among the module baselines): only then does it import torch.compile's modules
        ahead, and only then does its fork server compile once to warm them (seconds of a core
        that an hgemm job would pay for nothing)."""
        return job["task"]["kind"] == "module" and "compile" in self.cfg.baselines.module

    def _uses_dispatch_tools(self, job: dict[str, Any]) -> bool:
        """Whether the job records the candidate's ATen ops or its kernel launches."""
        task = job["task"]
        return job["job"] == "evaluate" and (
            dispatch_audit_wanted(task["kind"], task["allow_torch_ops"], self.cfg)
            or launch_evidence_wanted(task["allow_torch_ops"], self.cfg, self.cfg.backend))

    # ---- baselines -----------------------------------------------------------------------------
    def baseline_names(self, task: Task) -> list[str]:
        if task.kind == "module":
            return list(self.cfg.baselines.module)
        names = [n for n in self.cfg.baselines.hgemm if self.cfg.backend == "cuda" or n == "torch_matmul"]
        if task.hgemm is not None and task.hgemm.accumulator == "fp16" and self.cfg.backend == "cuda":
            names = [n for n in names if n != "torch_matmul"]   # torch.matmul accumulates in fp32
        return names

    def _baseline_cache_path(self, task: Task) -> Path:
        names = ",".join(self.baseline_names(task))
        key = f"{task.id}|{_task_digest(task)}|{self.device.key}|{self.cfg.timing.mode}|{self.cfg.backend}|{names}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        return self.cache_dir / "baselines" / f"{digest}.json"

    def baseline_record(self, task: Task) -> BaselineRecord:
        """This task's record of trusted baseline medians on this device (beside its baseline cache)."""
        r = self.cfg.reward
        return BaselineRecord.load(self._baseline_cache_path(task).with_suffix(".record.json"),
                                   r.baseline_record_keep, r.baseline_record_min)

    def _kept_compile(self, task: Task, baselines: list[str]) -> KeptCompile | None:
        """Where this task's compiled `compile` baseline is kept and compiled (None when no job of it
        compiles); the work dir is one per device, so inductor's absolute paths stay valid."""
        if "compile" not in baselines or not self.cfg.baselines.keep_compiled:
            return None
        key = f"{task.id}|{_task_digest(task)}|{self.device.key}|{self.cfg.backend}|{_TORCH_VERSION}"
        store = self.cache_dir / "compiled-baselines" / hashlib.sha256(key.encode()).hexdigest()[:24]
        root = Path(self.cfg.sandbox.scratch_root or tempfile.gettempdir())
        device = hashlib.sha256(self.device.key.encode()).hexdigest()[:12]
        return KeptCompile(store=store, workdir=root.resolve() / f"rlk-compile-{device}")

    def baselines(self, task: Task) -> dict[str, Any]:
        """Median time of every baseline for this task on this device and mode (cached with a TTL)."""
        path = self._baseline_cache_path(task)
        if path.is_file():
            data = json.loads(path.read_text())
            if time.time() - data["measured_at"] < self.cfg.baselines.cache_ttl_s:
                return data
        job = {"job": "baselines", "task": task_to_json(task), "backend": self.cfg.backend,
               "config": self.cfg.model_dump(mode="json"), "baselines": self.baseline_names(task),
               "seed": self._seed(), **self._native_baselines(task)}
        res, _ = self._run_job(job, None, "", self._kept_compile(task, job["baselines"]))
        failure = res.failure()
        if failure is not None or not res.payload or not res.payload.get("ok"):
            detail = failure[1] if failure else (res.payload or {}).get("detail", "")
            raise BaselineError(f"baseline measurement failed for {task.id}: {detail}")
        samples = res.payload.get("samples_ms", {})
        if not samples:
            raise BaselineError(f"no baseline runs for {task.id}: {res.payload.get('baseline_errors')}")
        data = {"measured_at": time.time(), "device": res.payload["device"],
                "ms": {n: median(v) for n, v in samples.items()},
                "spread": {n: rel_spread(v) for n, v in samples.items()},
                "errors": res.payload.get("baseline_errors", {})}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
        self.baseline_record(task).add(data["ms"])
        return data

    def best_baseline(self, task: Task) -> tuple[str, dict[str, float]]:
        data = self.baselines(task)
        ms = data["ms"]
        if self.cfg.baselines.reward_against == "first":
            name = next(n for n in self.baseline_names(task) if n in ms)
        else:
            name = min(ms, key=ms.get)
        return name, ms

    def _wrong_arch(self) -> str:
        """Why this device cannot run what the build holds ("" when it can or the capability is unknown)."""
        cap = self.device.capability
        b = self.cfg.build
        if self.cfg.backend != "cuda" or cap is None or runnable_arch(b.cuda_archs, b.embed_ptx, cap):
            return ""
        return (f"built for {', '.join(b.cuda_archs)}{' (+PTX)' if b.embed_ptx else ' (SASS only, no PTX)'}, but "
                f"{self.device.name} is sm_{cap[0]}{cap[1]}: no kernel image of this build can run on it. "
                f"Add sm_{cap[0]}{cap[1]} to eval.build.cuda_archs, or set eval.build.embed_ptx=true "
                "(PTX runs on newer GPUs than it was built for)")

    def _native_baselines(self, task: Task) -> dict[str, str]:
        """The cuBLAS baseline library, built here (once per evaluator): the sandboxed worker can
        neither build nor see the cache."""
        if self.cfg.backend != "cuda" or not any(n.startswith("cublas") for n in self.baseline_names(task)):
            return {}
        if self._cublas_library is None:
            from rl_kernels.evaluation.cublas import build_cublas_library

            self._cublas_library = str(build_cublas_library(self.cfg.build))
        return {"cublas_library": self._cublas_library}

    @staticmethod
    def _readable(job: dict[str, Any]) -> list[str]:
        return [str(Path(job["cublas_library"]).parent)] if "cublas_library" in job else []

    def _watchdog(self, baseline_ms: float) -> dict[str, float]:
        """The job's `sandbox.Watchdog`: each candidate call in flight may take `hang_factor` times the
        baseline's median (the slowest kernel still measured), on top of the floor; the worker's
        heartbeats say how many calls are in flight, phase by phase, on either backend."""
        return {"floor_s": self.cfg.sandbox.hang_floor_s,
                "per_call_s": self.cfg.sandbox.hang_factor * baseline_ms / 1e3}

    def _hidden(self) -> list[str]:
        """The build cache (other candidates' sources and artifacts) is no business of an evaluation."""
        return [str(self.cache_dir.resolve())]

    def _seed(self) -> int:
        """Fresh OS entropy per job (so no candidate can predict inputs or re-checked calls) unless fixed."""
        return self.cfg.seed if self.cfg.seed is not None else secrets.randbits(62)

    # ---- candidates ----------------------------------------------------------------------------
    def _threads(self) -> int:
        cores = self.cfg.timing.cpu_cores
        return len(cores) if cores else 0

    def build(self, task: Task, source: str) -> Build:
        return build_candidate(task, source, self.cfg.backend, self.cfg.build, self.cfg.allow_torch_rewrites)

    def evaluate(self, task: Task, source: str, build: Build | None = None) -> Measurement:
        t0 = time.monotonic()
        m = Measurement(task=task.id, backend=self.cfg.backend, mode=self.cfg.timing.mode,
                        shared_device=self.cfg.shared_device, device=self.device.name)
        try:
            self._evaluate(task, source, build, m)
        finally:
            m.eval_seconds = time.monotonic() - t0
        return m

    def _reject(self, m: Measurement, reason: Reason | str, detail: str) -> Measurement:
        m.rejected = reason.value if isinstance(reason, Reason) else reason
        m.detail = detail
        m.reward = measurement_reward(m, self.cfg.reward)
        return m

    def _evaluate(self, task: Task, source: str, build: Build | None, m: Measurement) -> Measurement:
        if task.kind == "module" and self.cfg.exclude_degenerate:
            degenerate = self._degenerate(task)
            if degenerate:
                return self._reject(m, Reason.DEGENERATE_TASK, degenerate)
        allow = task.allow_torch_ops or self.cfg.allow_torch_rewrites
        verdict = static_check(task, source, self.cfg.backend, allow_torch_ops=allow)
        if verdict.reason is not None:
            return self._reject(m, verdict.reason, verdict.detail)
        build = build or self.build(task, source)
        m.build_seconds, m.build_cached = build.seconds, build.cached
        m.extra["build_path"] = build.path
        if not build.ok:
            return self._reject(m, build.reason or Reason.COMPILE_ERROR, build.log[-4000:])
        m.compiled = True
        wrong_arch = self._wrong_arch()
        if wrong_arch:
            return self._reject(m, Reason.ARCH_MISMATCH, wrong_arch)
        try:
            baseline, all_ms = self.best_baseline(task)
        except BaselineError as exc:
            return self._reject(m, Reason.BASELINE_FAILED, str(exc))
        m.baselines_ms = all_ms
        m.baseline = baseline
        self._measure_and_score(task, source, build, baseline, m)
        if self._statistical_refusal(m):
            # Two refusals rest on a few samples against the host's clock: the clock check (wall time
            # vs events) and the sync guard (single guarded calls against plain ones).  Host load (a
            # busy machine, a timer sharing its cores) or one slow launch can push an honest kernel
            # over either once (the built-in gelu seed: 1 sync-guard refusal in 10 evaluations on the
            # H200); a forged clock or a side stream fails every time.  One new measurement in a new
            # process decides.
            m.extra["refusal_remeasured"] = f"{m.rejected}: {m.detail}"
            self._measure_and_score(task, source, build, baseline, m)
        if m.rejected is not None:
            return m

        def remeasure(settled: Callable[[], bool]) -> bool:
            """Up to `remeasure_attempts` new measurements (new process, new inputs) until `settled`;
            False when one of them failed (m then says why)."""
            for _ in range(self.cfg.reward.remeasure_attempts):
                payload = self._measure(task, source, build, baseline, m)
                if payload is None:
                    return False
                self._score(task, payload, baseline, m)
                m.extra["remeasured"] = m.extra.get("remeasured", 0) + 1
                if settled():
                    break
            return True

        if m.rejected is None and self._unstable(m):
            if not remeasure(lambda: not self._unstable(m)):
                return m
            if self._unstable(m):
                self._mark_unstable(m)
        record = self.baseline_record(task)
        if record.problem:
            m.extra["baseline_record_problem"] = record.problem
        if m.rejected is None and not untrusted_speed(m) and self._drifted(m, record):
            if not remeasure(lambda: not self._drifted(m, record)):
                return m
            if self._drifted(m, record):
                self._mark_drifted(m, record)
        if m.rejected is None and self._suspicious(m, task):
            if not remeasure(lambda: False):
                return m
            self._settle_suspicion(m, task)
        if earned_correct_reward(m) and not untrusted_speed(m):   # its baseline median may join the record
            record.add({baseline: m.baseline_ms})
        return m

    def _measure(self, task: Task, source: str, build: Build, baseline: str, m: Measurement) -> dict | None:
        seed = self._seed()
        m.extra.setdefault("seeds", []).append(seed)
        job = {"job": "evaluate", "task": task_to_json(task), "backend": self.cfg.backend,
               "config": self.cfg.model_dump(mode="json"), "baseline": baseline,
               "candidate_source": source, "seed": seed, "watchdog": self._watchdog(m.baselines_ms[baseline]),
               "own_kernels": build.kernels, **self._native_baselines(task)}
        res, host_wait_s = self._run_job(job, build.artifact, build.artifact_name, self._kept_compile(task, [baseline]))
        m.extra["phase_s"] = res.phase_s
        m.extra.setdefault("workers", []).append(res.worker)   # one per measurement (re-measurements too)
        m.extra["forked"] = res.forked
        if res.prestart_s is not None:
            m.extra["prestart_s"] = res.prestart_s
        if res.ahead is not None:
            m.extra["problem_ahead"] = res.ahead
        if self.host is not None:
            m.extra["host_wait_s"] = round(m.extra.get("host_wait_s", 0.0) + host_wait_s, 3)
        if res.hang is not None:
            m.extra["hang"] = res.hang
        failure = res.failure()
        if failure is not None:
            self._reject(m, failure[0], failure[1])
            return None
        assert res.payload is not None
        if not res.payload.get("ok"):
            self._reject(m, res.payload["reason"], res.payload.get("detail", ""))
            return None
        return res.payload

    def _measure_and_score(self, task: Task, source: str, build: Build, baseline: str, m: Measurement) -> None:
        payload = self._measure(task, source, build, baseline, m)
        if payload is not None:
            self._score(task, payload, baseline, m)

    @staticmethod
    def _statistical_refusal(m: Measurement) -> bool:
        """A refusal that noise can cause once: the clock check's gap, or the sync guard's escape."""
        clock_gap = m.rejected == Reason.TIMER_PATCHED.value and m.detail.startswith(CLOCK_GAP)
        return clock_gap or m.rejected == Reason.ASYNC_ESCAPE.value

    def _score(self, task: Task, p: dict[str, Any], baseline: str, m: Measurement) -> None:
        cand = p["samples_ms"]["candidate"]
        base = p["samples_ms"][baseline]
        m.correct = True
        m.rejected = None
        m.detail = ""
        m.device = p.get("device", m.device)
        m.candidate_ms, m.baseline_ms = median(cand), median(base)
        m.candidate_spread, m.baseline_spread = rel_spread(cand), rel_spread(base)
        m.samples = len(cand)
        ratios = [b / c for b, c in zip(base, cand) if c > 0]
        m.speedup = m.baseline_ms / m.candidate_ms if m.candidate_ms > 0 else float("inf")
        m.noise = rel_spread(ratios)
        self._keep_slowest(m, ratios)
        m.max_abs_err, m.rel_norm_err = p.get("max_abs_err"), p.get("rel_norm_err")
        m.sm_clock_mhz = p.get("sm_clock_mhz")
        m.extra.update(pool_sets=p.get("pool_sets"), rechecked=p.get("rechecked"),
                       boundary=p.get("boundary", "shared"))
        if p.get("baseline_compile") is not None:
            m.extra["baseline_compile"] = p["baseline_compile"]
        if p.get("launches") is not None:
            m.extra["launches"] = p["launches"]
        if p.get("clock_check"):
            m.extra.update(clock_check=p["clock_check"], order_seed=p.get("order_seed"))
        gaps = p.get("guard_gap_ms") or {}
        if "candidate" in gaps and baseline in gaps:
            excess = gaps["candidate"] - gaps[baseline]
            limit = self.cfg.timing.sync_guard_tolerance_us / 1e3 + self.cfg.timing.sync_guard_tolerance_rel * m.candidate_ms
            m.extra["sync_guard_excess_ms"] = excess
            if excess > limit:
                self._reject(m, Reason.ASYNC_ESCAPE,
                             f"work finished {excess * 1e3:.1f} us after the timed region ended "
                             f"(limit {limit * 1e3:.1f} us): side stream or deferred launch")
                m.correct = False
                return
        m.extra["noise_floor"] = noise_floor(m.noise, m.samples, self.cfg.reward)
        m.reward = measurement_reward(m, self.cfg.reward)

    @staticmethod
    def _keep_slowest(m: Measurement, ratios: list[float]) -> None:
        """The slowest pair of samples over every measurement of this evaluation: what an untrusted
        speed is paid at most (`reward.untrusted_speed_reward`), so re-measuring cannot hide it."""
        if ratios:
            m.extra["slowest_speedup"] = min(ratios + [m.extra.get("slowest_speedup", math.inf)])

    def _roofline_ms(self, task: Task, m: Measurement) -> float | None:
        if task.kind != "hgemm" or task.hgemm is None or self.cfg.timing.mode != "kernel":
            return None
        return min_time_ms(task.hgemm.flops, task.hgemm.min_bytes, m.device, self.cfg.roofline)

    def _unstable(self, m: Measurement) -> bool:
        """Candidate or baseline samples spread beyond what this backend's timer should show."""
        limit = self.cfg.reward.max_spread.get(self.cfg.backend, math.inf)
        return max(m.candidate_spread or 0.0, m.baseline_spread or 0.0) > limit

    def _mark_unstable(self, m: Measurement) -> None:
        """Reported with both spreads; paid at most as its slowest sample, never above 1x
        (`reward.untrusted_speed_reward`)."""
        limit = self.cfg.reward.max_spread[self.cfg.backend]
        m.extra["unstable_measurement"] = {"candidate_spread": m.candidate_spread,
                                           "baseline_spread": m.baseline_spread, "max_spread": limit}
        m.detail = (f"{Reason.UNSTABLE_MEASUREMENT.value}: spread {m.candidate_spread:.3f} (candidate) and "
                    f"{m.baseline_spread:.3f} (baseline {m.baseline}) above {limit} after "
                    f"{m.extra.get('remeasured', 0)} re-measurement(s); paid at most as its slowest sample, "
                    "never above 1x")
        m.reward = measurement_reward(m, self.cfg.reward)

    def _drifted(self, m: Measurement, record: BaselineRecord) -> bool:
        """The baseline's median is further off its record than `reward.baseline_drift` allows."""
        reference = record.reference(m.baseline)
        if reference is None or not m.baseline_ms:
            return False
        m.extra["baseline_reference_ms"] = reference
        limit = self.cfg.reward.baseline_drift.get(self.cfg.backend, math.inf)
        return (record.drift(m.baseline, m.baseline_ms) or 1.0) > limit

    def _mark_drifted(self, m: Measurement, record: BaselineRecord) -> None:
        """Reported with both medians (the reference as `_drifted` last found it); paid at most as its
        slowest speed, never above 1x (`reward.untrusted_speed_reward`)."""
        reference = m.extra["baseline_reference_ms"]
        limit = self.cfg.reward.baseline_drift[self.cfg.backend]
        m.extra["baseline_drift"] = {"baseline_ms": m.baseline_ms, "reference_ms": reference, "limit": limit,
                                     "record": len(record.ms[m.baseline])}
        m.detail = (f"{Reason.BASELINE_DRIFT.value}: baseline {m.baseline} measured {m.baseline_ms:.4f} ms against "
                    f"its usual {reference:.4f} ms on this device (median of {len(record.ms[m.baseline])} "
                    f"evaluations and baseline jobs; limit {limit}x either way) after "
                    f"{m.extra.get('remeasured', 0)} re-measurement(s): the host was disturbed during this "
                    "evaluation, so its speedup is not trusted; paid at most as its slowest speed, never above 1x")
        m.reward = measurement_reward(m, self.cfg.reward)

    def _suspicious(self, m: Measurement, task: Task) -> bool:
        bound = self._roofline_ms(task, m)
        too_fast = bound is not None and m.candidate_ms is not None and m.candidate_ms < bound * (1 - self.cfg.roofline.margin)
        return too_fast or (m.speedup or 0) > self.cfg.reward.speedup_ceiling

    def _settle_suspicion(self, m: Measurement, task: Task) -> None:
        if m.rejected is not None:
            return
        bound = self._roofline_ms(task, m)
        if bound is not None and m.candidate_ms is not None and m.candidate_ms < bound * (1 - self.cfg.roofline.margin):
            self._reject(m, Reason.FASTER_THAN_ROOFLINE,
                         f"{m.candidate_ms:.4f} ms is below the physical bound {bound:.4f} ms for this device")
            m.correct = False
            return
        if (m.speedup or 0) > self.cfg.reward.speedup_ceiling:
            # Re-measured in another process on another input stream and still implausible: no
            # reward until a person confirms it (the archive keeps it on its review list).
            m.flagged = (f"speedup {m.speedup:.2f}x above the ceiling {self.cfg.reward.speedup_ceiling}x "
                         f"after {m.extra.get('remeasured', 0)} independent re-measurement(s)")
            m.reward = measurement_reward(m, self.cfg.reward)

    def _degenerate(self, task: Task) -> str:
        from rl_kernels.tasks.hygiene import check_task_hygiene

        report = check_task_hygiene(task, cache_dir=self.cache_dir / "hygiene")
        if not report.degenerate:
            return ""
        return (f"the task is degenerate ({'; '.join(report.reasons)}) — its output rewards kernels that skip the "
                "work; fix the task, or set eval.exclude_degenerate=false to evaluate it anyway")


def summarize(measurements: list[Measurement]) -> dict[str, Any]:
    """Suite-level numbers for `bench`: correct count, geomean/median speedup and fast_p over the
    kernels with a believed speed (`archive.passed_every_gate`)."""
    speedups = [m.speedup for m in measurements if passed_every_gate(m)]
    n = len(measurements)
    geo = statistics.geometric_mean(speedups) if speedups else None
    return {
        "tasks": n,
        "compiled": sum(m.compiled for m in measurements),
        "correct": sum(m.correct for m in measurements),
        "geomean_speedup": geo,
        "median_speedup": statistics.median(speedups) if speedups else None,
        "fast_1.0": sum(s > 1.0 for s in speedups) / n if n else 0.0,
        "fast_1.2": sum(s > 1.2 for s in speedups) / n if n else 0.0,
        "rejected": {r: sum(m.rejected == r for m in measurements) for r in sorted({m.rejected for m in measurements if m.rejected})},
    }
