"""Evaluator measurements on one GPU, in one run: fidelity, noise, hack rejection, throughput.

    python benchmarks/gpu_evaluator.py --out DIR [--config configs/h200.yaml] [--sections a,b]
                                       [--candidates REGEX] [overrides]

Writes DIR/gpu_evaluator.json and DIR/gpu_evaluator.md (tables) after every section, so a run cut
short still reports what it finished.  Sections (all by default, in this order):
  build       every candidate below built in parallel (the compile pool's job): later sections hit
              the cache (eval.build.cache_dir).
  fidelity    torch.matmul HGEMM over 12 shapes (64^3 .. 8192^3): our `kernel`-mode median, under
              several protocol variants (the previous in-place pool refresh among them), against
              triton.testing.do_bench's median in the same process.
  noise       torch.matmul timed as candidate against itself as baseline (interleaved): the
              speedup's spread over repeats, and the per-call trace split by pool set and position.
  candidates  honest CUDA kernels (tiled, WMMA, CuTe sm_90a, fp16-acc seed), every GPU hack of
              tests/candidates/hacks (hgemm and module kind), the honest module candidate and the
              built-in suite's cuda seeds through the whole evaluator (gate, build, sandbox).
  throughput  one kernel evaluated repeatedly with builds and baselines cached: evaluations per
              minute and the fraction of the evaluation's wall time the GPU spends on timed calls.
  boundary    the cost of the trust boundary: honest kernels evaluated alternately under
              eval.sandbox.boundary=split (candidate in a runner process) and =shared (evaluation
              seconds, candidate and baseline medians, speedups), beside triton's do_bench of the
              same built kernel in a plain process.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.config import EvalConfig, load_config  # noqa: E402
from rl_kernels.evaluation.build import build_candidate  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.evaluation.guards import static_check  # noqa: E402
from rl_kernels.evaluation.problems import HgemmProblem  # noqa: E402
from rl_kernels.evaluation.timing import Flusher, FreshValues, Side, interleaved, rel_spread  # noqa: E402
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
# Noise is measured under these timing overrides of the config.
NOISE_VARIANTS: dict[str, dict[str, Any]] = {"queued": {}, "sync1": {"sync_every": 1}}


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


def _with_timing(cfg: EvalConfig, overrides: dict[str, Any]) -> EvalConfig:
    return cfg.model_copy(update={"timing": cfg.timing.model_copy(update=overrides)})


def _control_median(problem: HgemmProblem, cfg: EvalConfig, fresh: str) -> float:
    """Our protocol with the fresh input values handled otherwise: "none" (outputs still poisoned)
    isolates what refreshing does to the timed calls; "every_call" is the protocol before
    2026-12-03 (one set drawn right before each call); "burst_in_place" the one before 2026-12-07
    (the pool drawn in place in bursts, later calls' values in the sets ahead of their calls,
    nothing copied per call) against which the current copy-before-each-call costs what it costs."""
    pool = [problem.make_set("normal", 200 + j) for j in range(pool_size(problem, "cuda", cfg))]
    gen = torch.Generator(device="cuda").manual_seed(9)
    burst = None
    if fresh == "burst_in_place":
        burst = FreshValues(problem, pool, "normal", gen)
        burst.staged = pool   # drawn straight into the pool; each `write` then copies a set onto itself (no-op)

    def prepare(i: int) -> None:
        if fresh == "every_call":
            problem.refresh(pool[i], "normal", gen)
        problem.prepare(pool[i])

    side = Side(lambda i: problem.call_baseline("torch_matmul", pool[i]), prepare)
    flusher = Flusher("cuda", 2 * cache_bytes("cuda", cfg))
    res = interleaved({"m": side}, len(pool), cfg.timing, "cuda", flusher, fresh=burst)
    return statistics.median(res.ms["m"])


def fidelity(cfg: EvalConfig, rounds: int = 3) -> list[dict[str, Any]]:
    """Per shape, `rounds` rounds of: do_bench (fixed buffers), our timing as configured (the
    evaluator's own path: each call's values copied in right before it), ours with a host sync per
    call, ours without fresh input values, ours with one set drawn before every call (the protocol
    before 2026-12-03) and ours with the pool drawn in place (before 2026-12-07: `ours` over it is
    the per-call copy's cost).  Ratios are taken within a round (same thermal state) and the median
    over rounds is reported.  The split boundary's fidelity (the judge's copy ordered by events):
    section `boundary`, `split_ms/do_bench`."""
    from triton.testing import do_bench

    sync1 = _with_timing(cfg, {"sync_every": 1})
    rows = []
    for m, n, k in FIDELITY_SHAPES:
        spec = HgemmSpec(m, n, k, "fp32")
        problem = HgemmProblem(spec, "cuda", cfg)
        s = problem.make_set("normal", 1)
        a, b, c = s.args[0], s.args[1], s.outputs[0]
        cols: dict[str, list[float]] = {key: [] for key in ("do_bench_ms", "ours", "ours_sync1", "ours_no_refresh",
                                                             "ours_refresh_every_call", "ours_burst_in_place")}
        for _ in range(rounds):
            ref = do_bench(lambda: torch.matmul(a, b, out=c), warmup=25, rep=100, return_mode="median")
            cols["do_bench_ms"].append(ref)
            for key, ccfg in (("ours", cfg), ("ours_sync1", sync1)):
                res = timing(problem, ccfg, "cuda", 0, "torch_matmul", candidate=False)
                cols[key].append(statistics.median(res["samples_ms"]["torch_matmul"]) / ref)
            cols["ours_no_refresh"].append(_control_median(problem, cfg, "none") / ref)
            cols["ours_refresh_every_call"].append(_control_median(problem, cfg, "every_call") / ref)
            cols["ours_burst_in_place"].append(_control_median(problem, cfg, "burst_in_place") / ref)
            torch.cuda.empty_cache()
        row: dict[str, Any] = {"M_N_K": f"{m}_{n}_{k}", "GFLOP": spec.flops / 1e9,
                               "pool_sets": pool_size(problem, "cuda", cfg)}
        row.update({key: statistics.median(v) for key, v in cols.items()})
        row["ours_rounds"] = [round(x, 4) for x in cols["ours"]]
        # The yardstick's own movement between rounds (max/min - 1): at power-limited shapes do_bench
        # reads differently depending on what the GPU ran in the preceding second.
        row["do_bench_spread"] = max(cols["do_bench_ms"]) / min(cols["do_bench_ms"]) - 1
        row["TFLOP/s_ours"] = spec.flops / (row["ours"] * row["do_bench_ms"]) / 1e9
        rows.append(row)
        del s, a, b, c
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
    overall = statistics.median(ms for _, _, ms in trace)
    out["by_call_index_mod4"] = [round(statistics.median(ms for j, (_, _, ms) in enumerate(trace) if j % 4 == q)
                                       / overall, 4) for q in range(4)]
    return out


def noise(cfg: EvalConfig, repeats: int = 5) -> list[dict[str, Any]]:
    rows = []
    for variant, over in NOISE_VARIANTS.items():
        vcfg = _with_timing(cfg, over)
        for m, n, k in NOISE_SHAPES:
            problem = HgemmProblem(HgemmSpec(m, n, k, "fp32"), "cuda", vcfg)
            size = pool_size(problem, "cuda", vcfg)
            pool = [problem.make_set("normal", i) for i in range(size)]
            # as the evaluator: fresh values drawn in pool bursts, each set's written right before its call,
            fresh = FreshValues(problem, pool, vcfg.timing.input_distribution,
                                torch.Generator(device="cuda").manual_seed(7000))

            def run(i: int) -> Any:
                return problem.call_baseline("torch_matmul", pool[i])

            def prepare(i: int) -> None:   # and a poisoned output before every call
                problem.prepare(pool[i])

            flusher = Flusher("cuda", 2 * cache_bytes("cuda", vcfg))
            speedups, spreads, traces = [], [], []
            for r in range(repeats):
                smp = interleaved({"self_a": Side(run, prepare), "self_b": Side(run, prepare)}, size,
                                  vcfg.timing, "cuda", flusher, seed=r, fresh=fresh)
                a, b = smp.ms["self_a"], smp.ms["self_b"]
                speedups.append(statistics.median(b) / statistics.median(a))
                spreads.append(rel_spread([x / y for x, y in zip(b, a)]))
                traces.extend(smp.trace)
            bias = _trace_bias(traces)
            rows.append({"variant": variant, "M_N_K": f"{m}_{n}_{k}", "pool_sets": size,
                         "speedups": [round(x, 4) for x in speedups],
                         "max_abs_log_speedup": max(abs(math.log(x)) for x in speedups),
                         "pair_ratio_iqr_median": statistics.median(spreads),
                         **{f"b/a_{key}": v for key, v in bias.items()
                            if key not in ("second_over_first", "by_call_index_mod4")},
                         "by_call_index_mod4": bias["by_call_index_mod4"],
                         "second/first_in_pair": bias["second_over_first"],
                         "median_ms": statistics.median(ms for _, _, ms in traces),
                         "trace": [[nm[-1], i, round(ms, 5)] for nm, i, ms in traces]})
            pool.clear()
            torch.cuda.empty_cache()
    return rows


def _module_task(path: str) -> Task:
    rel = path.removeprefix("file:")
    return load_module_task(CANDIDATES / rel, task_id="test/" + rel.removesuffix(".py").replace("/", "_"))


def _task(task_ref: str) -> Task:
    return _module_task(task_ref) if task_ref.startswith("file:") else get_task(task_ref)


def _candidate_list(only: re.Pattern[str] | None) -> list[tuple[str, str, list[str] | None, bool]]:
    """(candidate, task reference, acceptable rejections or None for must-pass, inert); with `only`
    (--candidates), just those whose name matches."""
    items: list[tuple[str, str, list[str] | None, bool]] = [(f, t, None, False) for f, t in HONEST]
    manifest = yaml.safe_load((CANDIDATES / "hacks" / "manifest.yaml").read_text())["hacks"]
    for e in manifest:
        if e["backend"] == "cuda":
            ref = e["task"] if "task" in e else "file:hacks/" + e["task_file"]
            items.append(("hacks/" + e["file"], ref, e["expected"], bool(e.get("inert"))))
    for task in load_suite("builtin"):
        items.append((f"seed:{task.id}", task.id, None, False))
    if only is not None:
        items = [item for item in items if only.search(item[0])]
    return items


def _source(path: str, task: Task) -> str:
    if path.startswith("seed:"):
        return task.seeds["cuda"]
    return (CANDIDATES / path).read_text()


def prebuild(cfg: EvalConfig, only: re.Pattern[str] | None) -> list[dict[str, Any]]:
    """Build every candidate in parallel first (the compile pool's job), so evaluations hit the cache."""
    items = _candidate_list(only)
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


def candidates(cfg: EvalConfig, only: re.Pattern[str] | None,
               module_compile_tasks: tuple[str, ...] = ("builtin/softmax",)) -> list[dict[str, Any]]:
    """Everything through `Evaluator.evaluate`.  Module tasks time against eager only, except
    `module_compile_tasks` (torch.compile costs ~20 s per evaluation process)."""
    eager_cfg = cfg.model_copy(update={"baselines": cfg.baselines.model_copy(update={"module": ["eager"]})})
    ev_eager, ev_full = Evaluator(eager_cfg), Evaluator(cfg)
    rows = []
    for path, task_ref, expected, inert in _candidate_list(only):
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


BOUNDARY = [("seed:fp16", "hgemm/fp16/256_256_256"),
            ("honest/hgemm_cuda_fp32.cu", "hgemm/fp32/1024_1024_1024"),
            ("hgemm/tiled_fp32acc.cu", "hgemm/fp32/2048_2048_2048"),
            ("hgemm/wmma_fp32acc.cu", "hgemm/fp32/4096_4096_4096"),
            ("honest/relu_cuda.py", "file:honest/tasks/relu.py")]


_DO_BENCH = """
import sys, torch
from triton.testing import do_bench
from rl_kernels.evaluation.artifact import load_hgemm_entry
from rl_kernels.evaluation.problems import HgemmProblem
from rl_kernels.config import EvalConfig
from rl_kernels.types import HgemmSpec
m, n, k = map(int, sys.argv[2:5])
entry = load_hgemm_entry(sys.argv[1])
s = HgemmProblem(HgemmSpec(m, n, k, "fp32"), "cuda", EvalConfig(backend="cuda")).make_set("normal", 3)
print(do_bench(lambda: entry(s.args[0], s.args[1], s.args[2], s.outputs[0]), warmup=25, rep=100, return_mode="median"))
"""


def _do_bench_artifact(build: Any, spec: HgemmSpec, where: Path) -> float | None:
    """triton's do_bench of a built hgemm artifact, in a process of its own (fixed buffers, no sandbox)."""
    import subprocess

    from rl_kernels.evaluation.artifact import unpack_artifact

    so = unpack_artifact(build.artifact, build.artifact_name, where)
    res = subprocess.run([sys.executable, "-c", _DO_BENCH, str(so), str(spec.m), str(spec.n), str(spec.k)],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    try:
        return float(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"do_bench of {so} failed: {res.stderr[-800:]}", flush=True)
        return None


def boundary(cfg: EvalConfig, repeats: int = 3) -> list[dict[str, Any]]:
    """Per kernel: `repeats` evaluations with the candidate in a runner process (split) and in the
    worker itself (shared), alternating (same thermal state), and do_bench of the same artifact in a
    plain process as the independent clock."""
    evaluators = {b: Evaluator(cfg.model_copy(update={"sandbox": cfg.sandbox.model_copy(update={"boundary": b})}))
                  for b in ("split", "shared")}
    rows = []
    for path, task_id in BOUNDARY:
        task = _task(task_id)
        src = _source(path, task)
        build = build_candidate(task, src, "cuda", cfg.build)
        got: dict[str, list[Any]] = {b: [] for b in evaluators}
        for _ in range(repeats):
            for b, ev in evaluators.items():
                got[b].append(ev.evaluate(task, src))
        ref = None
        if task.hgemm is not None:
            ref = _do_bench_artifact(build, task.hgemm, Path(cfg.build.cache_dir) / "bench" / task_id.replace("/", "_"))
        row: dict[str, Any] = {"candidate": path, "task": task_id, "do_bench_ms": ref}
        for b, ms in got.items():
            row[f"{b}_correct"] = all(m.correct for m in ms)
            row[f"{b}_eval_s"] = statistics.median(m.eval_seconds for m in ms)
            row[f"{b}_ms"] = statistics.median(m.candidate_ms or math.nan for m in ms)
            row[f"{b}_base_ms"] = statistics.median(m.baseline_ms or math.nan for m in ms)
            row[f"{b}_ms/do_bench"] = row[f"{b}_ms"] / ref if ref else None
            row[f"{b}_speedups"] = " ".join(f"{m.speedup:.3f}" if m.speedup else "-" for m in ms)
            row[f"{b}_detail"] = next((m.detail[:120] for m in ms if not m.correct), "")
        rows.append(row)
    return rows


SECTIONS = ("build", "fidelity", "noise", "candidates", "throughput", "boundary")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=str(REPO / "configs" / "h200.yaml"))
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--candidates", metavar="REGEX", help="build and evaluate only the candidates matching this")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    only = re.compile(args.candidates) if args.candidates else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config, args.overrides).eval
    setup_device("cuda", cfg)
    rep = Report(out)
    rep.data["timing_config"] = cfg.timing.model_dump()
    runners: dict[str, tuple[Callable[[], list[dict[str, Any]]], str]] = {
        "build": (lambda: prebuild(cfg, only), "all candidates built in parallel (16 threads)"),
        "fidelity": (lambda: fidelity(cfg),
                     "torch.matmul fp16 (fp32 acc); columns after do_bench_ms are medians over 3 rounds "
                     "of (time / do_bench time in the same round)"),
        "noise": (lambda: noise(cfg), "torch.matmul against itself, interleaved, 5 repeats of 30 pairs; "
                                      "b/a_* = median(self_b)/median(self_a) within a subset of calls"),
        "candidates": (lambda: candidates(cfg, only), "whole evaluator: gate, build, sandbox, correctness, timing"),
        "throughput": (lambda: throughput(cfg), "builds and baselines cached; tiled kernel at 2048^3"),
        "boundary": (lambda: boundary(cfg), "split vs shared boundary, alternating, 3 evaluations each; "
                                            "ms/do_bench = the evaluator's candidate median over do_bench's"),
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
    print((out / "gpu_evaluator.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
