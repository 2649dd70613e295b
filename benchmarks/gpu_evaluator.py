"""Evaluator measurements on one GPU, in one run: fidelity, noise, hack rejection, throughput.

    python benchmarks/gpu_evaluator.py --out DIR [--config configs/h200.yaml]

Writes DIR/gpu_evaluator.json and DIR/gpu_evaluator.md (tables) after every section, so a run cut
short still reports what it finished.  Sections:
  fidelity    torch.matmul HGEMM over 12 shapes (64^3 .. 8192^3): our `kernel`-mode median against
              triton.testing.do_bench's median in the same process (both flush L2).
  noise       torch.matmul timed as candidate against itself as baseline (interleaved): the
              speedup's spread over repeats; the reward's noise floor is set from this.
  candidates  honest CUDA kernels (tiled, WMMA, CuTe sm_90a, fp16-acc seed) and every GPU hgemm
              hack of tests/candidates/hacks through the whole evaluator (gate, build, sandbox).
  throughput  one kernel evaluated repeatedly with builds and baselines cached: evaluations per
              minute and the fraction of the evaluation's wall time the GPU spends on timed calls.
"""

from __future__ import annotations

import argparse
import json
import math
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
from rl_kernels.evaluation.problems import HgemmProblem  # noqa: E402
from rl_kernels.evaluation.timing import Flusher, Side, interleaved, rel_spread  # noqa: E402
from rl_kernels.evaluation.worker import setup_device, timing  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402
from rl_kernels.types import HgemmSpec  # noqa: E402

CANDIDATES = REPO / "tests" / "candidates"
FIDELITY_SHAPES = [(64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                   (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024),
                   (1024, 4096, 4096), (8192, 8192, 1024), (2048, 8192, 2048)]
HONEST = [("honest/hgemm_cuda_fp32.cu", "hgemm/fp32/1024_1024_1024"),
          ("hgemm/tiled_fp32acc.cu", "hgemm/fp32/2048_2048_2048"),
          ("hgemm/wmma_fp32acc.cu", "hgemm/fp32/4096_4096_4096"),
          ("hgemm/cute_sm90.cu", "hgemm/fp32/4096_4096_4096"),
          ("seed:fp16", "hgemm/fp16/1024_1024_1024")]


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
    return str(v).replace("|", "/").replace("\n", " ")[:120]


def fidelity(cfg: EvalConfig) -> list[dict[str, Any]]:
    from triton.testing import do_bench

    rows = []
    for m, n, k in FIDELITY_SHAPES:
        spec = HgemmSpec(m, n, k, "fp32")
        problem = HgemmProblem(spec, "cuda", cfg)
        ours = statistics.median(timing(problem, cfg, "cuda", 0, "torch_matmul", candidate=False)["samples_ms"]["torch_matmul"])
        s = problem.make_set("normal", 1)
        a, b, c = s.args[0], s.args[1], s.outputs[0]
        ref = do_bench(lambda: torch.matmul(a, b, out=c), warmup=25, rep=100, return_mode="median")
        rows.append({"M_N_K": f"{m}_{n}_{k}", "GFLOP": spec.flops / 1e9, "ours_ms": ours, "do_bench_ms": ref,
                     "ratio": ours / ref, "TFLOP/s": spec.flops / ours / 1e9})
    return rows


def noise(cfg: EvalConfig, repeats: int = 5) -> list[dict[str, Any]]:
    rows = []
    for m, n, k in [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (256, 256, 256)]:
        problem = HgemmProblem(HgemmSpec(m, n, k, "fp32"), "cuda", cfg)
        pool = [problem.make_set("normal", i) for i in range(max(2, min(16, (3 * 60 * 2**20) // problem.set_bytes + 1)))]
        run: Callable[[int], Any] = lambda i: problem.call_baseline("torch_matmul", pool[i])
        flusher = Flusher("cuda", 2 * torch.cuda.get_device_properties(0).L2_cache_size)
        speedups, spreads = [], []
        for r in range(repeats):
            smp = interleaved({"self_a": Side(run), "self_b": Side(run)}, len(pool), cfg.timing, "cuda", flusher, seed=r)
            a, b = smp.ms["self_a"], smp.ms["self_b"]
            speedups.append(statistics.median(b) / statistics.median(a))
            spreads.append(rel_spread([x / y for x, y in zip(b, a)]))
        rows.append({"M_N_K": f"{m}_{n}_{k}", "speedups": [round(x, 4) for x in speedups],
                     "max_abs_log_speedup": max(abs(math.log(x)) for x in speedups),
                     "pair_ratio_iqr_median": statistics.median(spreads)})
    return rows


def _candidate_list() -> list[tuple[str, str, list[str] | None, bool]]:
    items: list[tuple[str, str, list[str] | None, bool]] = [(f, t, None, False) for f, t in HONEST]
    manifest = yaml.safe_load((CANDIDATES / "hacks" / "manifest.yaml").read_text())["hacks"]
    for e in manifest:
        if e["backend"] == "cuda" and "task" in e:
            items.append(("hacks/" + e["file"], e["task"], e["expected"], bool(e.get("inert"))))
    return items


def _source(path: str, task_id: str) -> str:
    if path.startswith("seed:"):
        return get_task(task_id).seeds["cuda"]
    return (CANDIDATES / path).read_text()


def prebuild(cfg: EvalConfig) -> dict[str, float]:
    """Build every candidate in parallel first (the compile pool's job), so evaluations hit the cache."""
    items = _candidate_list()
    with ThreadPoolExecutor(8) as pool:
        futs = {p: pool.submit(build_candidate, get_task(t), _source(p, t), "cuda", cfg.build) for p, t, _, _ in items}
        return {p: f.result().seconds for p, f in futs.items()}


def candidates(cfg: EvalConfig, build_s: dict[str, float]) -> list[dict[str, Any]]:
    ev = Evaluator(cfg)
    rows = []
    for path, task_id, expected, inert in _candidate_list():
        m = ev.evaluate(get_task(task_id), _source(path, task_id))
        ok = (m.rejected is None) if expected is None else (m.rejected in expected or (inert and m.rejected is None))
        rows.append({"candidate": path, "task": task_id, "verdict": m.rejected or "correct", "as_expected": ok,
                     "speedup": m.speedup, "candidate_ms": m.candidate_ms, "baseline": m.baseline,
                     "baseline_ms": m.baseline_ms, "rel_norm_err": m.rel_norm_err,
                     "sync_guard_excess_us": (m.extra.get("sync_guard_excess_ms") or 0) * 1e3,
                     "build_s": build_s.get(path), "eval_s": m.eval_seconds,
                     "detail": (m.detail or "")[:160]})
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=str(REPO / "configs" / "h200.yaml"))
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config, args.overrides).eval
    setup_device("cuda", cfg)
    rep = Report(out)
    with ThreadPoolExecutor(1) as bg:
        builds = bg.submit(prebuild, cfg)
        for name, fn, note in [
            ("fidelity", lambda: fidelity(cfg), "torch.matmul fp16 (fp32 acc): kernel-mode median vs do_bench median"),
            ("noise", lambda: noise(cfg), "torch.matmul against itself, interleaved, 5 repeats of 30 pairs"),
        ]:
            t0 = time.monotonic()
            try:
                rep.section(name, fn(), note)
            except Exception:  # noqa: BLE001 - a benchmark section failing must not lose the others
                rep.data[name + "_error"] = traceback.format_exc()
                rep.save()
            print(f"{name}: {time.monotonic() - t0:.1f}s", flush=True)
        build_s = builds.result()
    for name, fn, note in [
        ("candidates", lambda: candidates(cfg, build_s), "whole evaluator: gate, build, sandbox, correctness, timing"),
        ("throughput", lambda: throughput(cfg), "builds and baselines cached; tiled kernel at 2048^3"),
    ]:
        t0 = time.monotonic()
        try:
            rep.section(name, fn(), note)
        except Exception:  # noqa: BLE001
            rep.data[name + "_error"] = traceback.format_exc()
            rep.save()
        print(f"{name}: {time.monotonic() - t0:.1f}s", flush=True)
    print((out / "gpu_evaluator.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
