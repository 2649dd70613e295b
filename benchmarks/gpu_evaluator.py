"""Evaluator measurements on one GPU, in one run: fidelity, noise, hack rejection, throughput.

    python benchmarks/gpu_evaluator.py --out DIR [--config configs/h200.yaml] [--sections a,b] [overrides]

Writes DIR/gpu_evaluator.json and DIR/gpu_evaluator.md (tables) after every section, so a run cut
short still reports what it finished.  Sections (all by default, in this order):
  build       every candidate below built in parallel (the compile pool's job): later sections hit
              the cache (eval.build.cache_dir).
  fidelity    torch.matmul HGEMM over 12 shapes (64^3 .. 8192^3): our `kernel`-mode median, under
              several protocol variants, against triton.testing.do_bench's median in the same
              process, with the mean SM clock and board power (NVML) while each variant ran.
  noise       torch.matmul timed as candidate against itself as baseline (interleaved): the
              speedup's spread over repeats, and the per-call trace split by pool set and position.
  candidates  honest CUDA kernels (tiled, WMMA, CuTe sm_90a, fp16-acc seed), every GPU hack of
              tests/candidates/hacks (hgemm and module kind), the honest module candidate and the
              built-in suite's cuda seeds through the whole evaluator (gate, build, sandbox).
  throughput  one kernel evaluated repeatedly with builds and baselines cached: evaluations per
              minute and the fraction of the evaluation's wall time the GPU spends on timed calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import EvalConfig, load_config  # noqa: E402
from rl_kernels.evaluation.build import build_candidate  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.evaluation.guards import static_check  # noqa: E402
from rl_kernels.evaluation.problems import HgemmProblem  # noqa: E402
from rl_kernels.evaluation.timing import Flusher, Side, interleaved, rel_spread  # noqa: E402
from rl_kernels.evaluation.worker import cache_bytes, pool_size, setup_device, timing  # noqa: E402
from rl_kernels.tasks import get_task, load_suite  # noqa: E402
from rl_kernels.tasks.module import load_module_task  # noqa: E402
from rl_kernels.types import HgemmSpec, Task  # noqa: E402

CANDIDATES = REPO / "tests" / "candidates"
FIDELITY_SHAPES = [(64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                   (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024),
                   (1024, 4096, 4096), (8192, 8192, 1024), (2048, 8192, 2048)]
NOISE_SHAPES = [(256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)]
HONEST = [("honest/hgemm_cuda_fp32.cu", "hgemm/fp32/1024_1024_1024"),
          ("hgemm/tiled_fp32acc.cu", "hgemm/fp32/2048_2048_2048"),
          ("hgemm/wmma_fp32acc.cu", "hgemm/fp32/4096_4096_4096"),
          ("hgemm/cute_sm90.cu", "hgemm/fp32/4096_4096_4096"),
          ("seed:fp16", "hgemm/fp16/1024_1024_1024"),
          ("honest/relu_cuda.py", "file:honest/tasks/relu.py")]
# Timing protocol variants compared against do_bench: name -> timing overrides.
VARIANTS: dict[str, dict[str, Any]] = {
    "sync1": {"sync_every": 1},            # host sync after every call (GPU idles between samples)
    "sync8": {"sync_every": 8},
    "sync64": {"sync_every": 64},          # queued back to back, one host sync per 64 calls
    "sync64_nospin": {"sync_every": 64, "launch_cover_cycles": 0},
}


class Report:
    def __init__(self, out: Path):
        self.out = out
        self.data: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                     "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
        self.md: list[str] = []

    def section(self, name: str, rows: list[dict[str, Any]], note: str = "") -> None:
        self.data[name] = rows
        if rows:
            cols = list(rows[0])
            self.md += [f"## {name}", note, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            self.md += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
            self.md.append("")
        self.save()

    def save(self) -> None:
        (self.out / "gpu_evaluator.json").write_text(json.dumps(self.data, indent=1, default=str))
        (self.out / "gpu_evaluator.md").write_text("\n".join(self.md) + "\n")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v)
    return str(v).replace("|", "/").replace("\n", " ")[:120]


class GpuMonitor:
    """Samples the SM clock and board power through NVML every few ms on a background thread.

    `window()` brackets a measurement; its means say which clock regime the measurement ran in
    (the H200 lowers its clock under sustained tensor-core load to stay within its power limit).
    """

    def __init__(self, period_s: float = 0.002):
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        self.samples: list[tuple[float, float, float]] = []
        self.period_s = period_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        nv = self.nvml
        while not self.stop.is_set():
            clk = nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM)
            watts = nv.nvmlDeviceGetPowerUsage(self.handle) / 1e3
            self.samples.append((time.monotonic(), float(clk), watts))
            time.sleep(self.period_s)

    @contextlib.contextmanager
    def window(self, into: dict[str, Any], prefix: str) -> Iterator[None]:
        t0 = time.monotonic()
        yield
        t1 = time.monotonic()
        inside = [(c, w) for t, c, w in self.samples if t0 <= t <= t1]
        into[prefix + "_mhz"] = statistics.mean(c for c, _ in inside) if inside else None
        into[prefix + "_W"] = statistics.mean(w for _, w in inside) if inside else None

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def _with_timing(cfg: EvalConfig, overrides: dict[str, Any]) -> EvalConfig:
    return cfg.model_copy(update={"timing": cfg.timing.model_copy(update=overrides)})


def fidelity(cfg: EvalConfig, mon: GpuMonitor) -> list[dict[str, Any]]:
    """Per shape: do_bench on fixed buffers and on our rotating pool, and our protocol variants."""
    from triton.testing import do_bench

    rows = []
    for m, n, k in FIDELITY_SHAPES:
        spec = HgemmSpec(m, n, k, "fp32")
        problem = HgemmProblem(spec, "cuda", cfg)
        row: dict[str, Any] = {"M_N_K": f"{m}_{n}_{k}", "GFLOP": spec.flops / 1e9}
        s = problem.make_set("normal", 1)
        a, b, c = s.args[0], s.args[1], s.outputs[0]
        with mon.window(row, "do_bench"):
            ref = do_bench(lambda: torch.matmul(a, b, out=c), warmup=25, rep=100, return_mode="median")
        row["do_bench_ms"] = ref
        pool = [problem.make_set("normal", 100 + j) for j in range(pool_size(problem, "cuda", cfg))]
        nxt = iter(range(10**9))

        def rotating() -> None:
            p = pool[next(nxt) % len(pool)]
            torch.matmul(p.args[0], p.args[1], out=p.outputs[0])

        with mon.window(row, "do_bench_pool"):
            row["do_bench_pool_ratio"] = do_bench(rotating, warmup=25, rep=100, return_mode="median") / ref
        pool.clear()
        for name, over in VARIANTS.items():
            vcfg = _with_timing(cfg, over)
            with mon.window(row, name):
                res = timing(problem, vcfg, "cuda", 0, "torch_matmul", candidate=False)
            row[name + "_ratio"] = statistics.median(res["samples_ms"]["torch_matmul"]) / ref
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def _trace_bias(trace: list[tuple[str, int, float]]) -> dict[str, float]:
    """Median ms of side b over side a overall, by position in the AB/BA pair, and by pool set parity."""
    def med(pred: Callable[[int, str, int], bool], side: str) -> float:
        xs = [ms for j, (nm, i, ms) in enumerate(trace) if nm == side and pred(j, nm, i)]
        return statistics.median(xs) if xs else float("nan")

    out = {}
    for label, pred in [("first_in_pair", lambda j, nm, i: j % 2 == 0),
                        ("second_in_pair", lambda j, nm, i: j % 2 == 1),
                        ("even_set", lambda j, nm, i: i % 2 == 0), ("odd_set", lambda j, nm, i: i % 2 == 1)]:
        out[label] = med(pred, "self_b") / med(pred, "self_a")
    first = [ms for j, (_, _, ms) in enumerate(trace) if j % 2 == 0]
    second = [ms for j, (_, _, ms) in enumerate(trace) if j % 2 == 1]
    out["second_over_first"] = statistics.median(second) / statistics.median(first)
    return out


def noise(cfg: EvalConfig, repeats: int = 5) -> list[dict[str, Any]]:
    rows = []
    for variant in ("sync1", "sync64"):
        vcfg = _with_timing(cfg, VARIANTS[variant])
        for m, n, k in NOISE_SHAPES:
            problem = HgemmProblem(HgemmSpec(m, n, k, "fp32"), "cuda", vcfg)
            size = pool_size(problem, "cuda", vcfg)
            pool = [problem.make_set("normal", i) for i in range(size)]
            gen = torch.Generator(device="cuda").manual_seed(7000)

            def run(i: int) -> Any:
                return problem.call_baseline("torch_matmul", pool[i])

            def prepare(i: int) -> None:   # as the evaluator: fresh values, poisoned output
                problem.refresh(pool[i], vcfg.timing.input_distribution, gen)
                problem.prepare(pool[i])

            flusher = Flusher("cuda", 2 * cache_bytes("cuda", vcfg))
            speedups, spreads, traces = [], [], []
            for r in range(repeats):
                smp = interleaved({"self_a": Side(run, prepare), "self_b": Side(run, prepare)}, size,
                                  vcfg.timing, "cuda", flusher, seed=r)
                a, b = smp.ms["self_a"], smp.ms["self_b"]
                speedups.append(statistics.median(b) / statistics.median(a))
                spreads.append(rel_spread([x / y for x, y in zip(b, a)]))
                traces.extend(smp.trace)
            bias = _trace_bias(traces)
            rows.append({"variant": variant, "M_N_K": f"{m}_{n}_{k}", "pool_sets": size,
                         "speedups": [round(x, 4) for x in speedups],
                         "max_abs_log_speedup": max(abs(math.log(x)) for x in speedups),
                         "pair_ratio_iqr_median": statistics.median(spreads),
                         **{f"b/a_{key}": v for key, v in bias.items() if key != "second_over_first"},
                         "second/first_in_pair": bias["second_over_first"],
                         "median_ms": statistics.median(ms for _, _, ms in traces)})
            pool.clear()
            torch.cuda.empty_cache()
    return rows


def _module_task(path: str) -> Task:
    rel = path.removeprefix("file:")
    return load_module_task(CANDIDATES / rel, task_id="test/" + rel.removesuffix(".py").replace("/", "_"))


def _task(task_ref: str) -> Task:
    return _module_task(task_ref) if task_ref.startswith("file:") else get_task(task_ref)


def _candidate_list() -> list[tuple[str, str, list[str] | None, bool]]:
    """(candidate, task reference, acceptable rejections or None for must-pass, inert)."""
    items: list[tuple[str, str, list[str] | None, bool]] = [(f, t, None, False) for f, t in HONEST]
    manifest = yaml.safe_load((CANDIDATES / "hacks" / "manifest.yaml").read_text())["hacks"]
    for e in manifest:
        if e["backend"] == "cuda":
            ref = e["task"] if "task" in e else "file:hacks/" + e["task_file"]
            items.append(("hacks/" + e["file"], ref, e["expected"], bool(e.get("inert"))))
    for task in load_suite("builtin"):
        items.append((f"seed:{task.id}", task.id, None, False))
    return items


def _source(path: str, task: Task) -> str:
    if path.startswith("seed:"):
        return task.seeds["cuda"]
    return (CANDIDATES / path).read_text()


def prebuild(cfg: EvalConfig) -> list[dict[str, Any]]:
    """Build every candidate in parallel first (the compile pool's job), so evaluations hit the cache."""
    items = _candidate_list()
    with ThreadPoolExecutor(16) as pool:
        futs = {}
        for p, t, _, _ in items:
            task = _task(t)
            src = _source(p, task)
            if static_check(task, src, "cuda", allow_torch_ops=task.allow_torch_ops).reason is None:
                futs[(p, t)] = pool.submit(build_candidate, task, src, "cuda", cfg.build)
        rows = []
        for (p, t), f in futs.items():
            b = f.result()
            rows.append({"candidate": p, "task": t, "ok": b.ok, "reason": b.reason, "build_s": b.seconds,
                         "cached": b.cached})
        return rows


def candidates(cfg: EvalConfig, module_compile_tasks: tuple[str, ...] = ("builtin/softmax",)) -> list[dict[str, Any]]:
    """Everything through `Evaluator.evaluate`.  Module tasks time against eager only, except
    `module_compile_tasks` (torch.compile costs ~20 s per evaluation process)."""
    eager_cfg = cfg.model_copy(update={"baselines": cfg.baselines.model_copy(update={"module": ["eager"]})})
    ev_eager, ev_full = Evaluator(eager_cfg), Evaluator(cfg)
    rows = []
    for path, task_ref, expected, inert in _candidate_list():
        task = _task(task_ref)
        ev = ev_full if task.kind == "hgemm" or task.id in module_compile_tasks else ev_eager
        m = ev.evaluate(task, _source(path, task))
        ok = (m.rejected is None) if expected is None else (m.rejected in expected or (inert and m.rejected is None))
        rows.append({"candidate": path, "task": task.id, "verdict": m.rejected or "correct", "as_expected": ok,
                     "speedup": m.speedup, "candidate_ms": m.candidate_ms, "baseline": m.baseline,
                     "baseline_ms": m.baseline_ms, "noise": m.noise, "rel_norm_err": m.rel_norm_err,
                     "sync_guard_excess_us": (m.extra.get("sync_guard_excess_ms") or 0) * 1e3,
                     "eval_s": m.eval_seconds, "detail": (m.detail or "")[:160]})
    return rows


def throughput(cfg: EvalConfig, n: int = 8) -> list[dict[str, Any]]:
    ev = Evaluator(cfg)
    task = get_task("hgemm/fp32/2048_2048_2048")
    src = (CANDIDATES / "hgemm" / "tiled_fp32acc.cu").read_text()
    ev.evaluate(task, src)  # build + baselines cached
    t0 = time.monotonic()
    ms = [ev.evaluate(task, src) for _ in range(n)]
    wall = time.monotonic() - t0
    busy = [(m.samples * (m.candidate_ms + m.baseline_ms)) / 1e3 / m.eval_seconds for m in ms if m.correct]
    return [{"evaluations": n, "wall_s": wall, "per_minute": 60 * n / wall,
             "median_eval_s": statistics.median(m.eval_seconds for m in ms),
             "timed_gpu_fraction": statistics.median(busy) if busy else None,
             "all_correct": all(m.correct for m in ms)}]


SECTIONS = ("build", "fidelity", "noise", "candidates", "throughput")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=str(REPO / "configs" / "h200.yaml"))
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config, args.overrides).eval
    setup_device("cuda", cfg)
    rep = Report(out)
    rep.data["timing_config"] = cfg.timing.model_dump()
    mon = GpuMonitor()
    runners: dict[str, tuple[Callable[[], list[dict[str, Any]]], str]] = {
        "build": (lambda: prebuild(cfg), "all candidates built in parallel (16 threads)"),
        "fidelity": (lambda: fidelity(cfg, mon),
                     "torch.matmul fp16 (fp32 acc); ratio = our median / do_bench median (fixed buffers); "
                     "_mhz/_W = mean SM clock / board power while that measurement ran"),
        "noise": (lambda: noise(cfg), "torch.matmul against itself, interleaved, 5 repeats of 30 pairs; "
                                      "b/a_* = median(self_b)/median(self_a) within a subset of calls"),
        "candidates": (lambda: candidates(cfg), "whole evaluator: gate, build, sandbox, correctness, timing"),
        "throughput": (lambda: throughput(cfg), "builds and baselines cached; tiled kernel at 2048^3"),
    }
    for name in sections:
        fn, note = runners[name]
        t0 = time.monotonic()
        try:
            rep.section(name, fn(), note)
        except Exception:  # noqa: BLE001 - a benchmark section failing must not lose the others
            rep.data[name + "_error"] = traceback.format_exc()
            rep.save()
        rep.data.setdefault("section_seconds", {})[name] = time.monotonic() - t0
        rep.save()
        print(f"{name}: {time.monotonic() - t0:.1f}s", flush=True)
    mon.close()
    print((out / "gpu_evaluator.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
