"""A directory of hgemm kernels nobody here wrote, through the evaluator and beside triton's do_bench.

    python benchmarks/kernel_corpus.py --config configs/h200.yaml --suite hgemm/fp32 \\
        --candidates DIR --jobs 16 --out OUT [--build-only] [--limit N] [overrides]

What `rl-kernels bench` does (every file matched to its task by name, all built first in a process
pool of `--jobs`, then evaluated one at a time), plus, for every kernel the evaluator found correct,
an independent clock: triton's `do_bench` of the same built artifact and of `torch.matmul` on the
same inputs, in a plain process of their own (fixed buffers, no sandbox), alternating over 3 rounds.
Prints one row per kernel: how it launches (own `__global__` or a CUTLASS device-level adapter), the
verdict, the evaluator's candidate time and speedup against its best baseline and against
torch.matmul, and do_bench's times and speedup against torch.matmul.  `--build-only` stops after the
build phase (to compare `--jobs` settings on a fresh `eval.build.cache_dir`).  Writes OUT/corpus.json
after the build phase and after every kernel (a run cut short keeps what it measured), and OUT/corpus.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels.cli import match_candidates, prebuild  # noqa: E402
from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.evaluation.artifact import unpack_artifact  # noqa: E402
from rl_kernels.evaluation.evaluator import Evaluator  # noqa: E402
from rl_kernels.tasks import load_suite  # noqa: E402
from rl_kernels.types import Build, HgemmSpec  # noqa: E402

_DO_BENCH = """
import json, statistics, sys, torch
from triton.testing import do_bench
from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.artifact import load_hgemm_entry
from rl_kernels.evaluation.problems import HgemmProblem
from rl_kernels.types import HgemmSpec
m, n, k = map(int, sys.argv[2:5])
entry = load_hgemm_entry(sys.argv[1])
s = HgemmProblem(HgemmSpec(m, n, k, "fp32"), "cuda", EvalConfig(backend="cuda")).make_set("normal", 3)
a, b, c = s.args[0], s.args[1], s.outputs[0]
ref = torch.empty_like(c)
cand, mm = [], []
for _ in range(3):
    cand.append(do_bench(lambda: entry(a, b, s.args[2], c), warmup=25, rep=100, return_mode="median"))
    mm.append(do_bench(lambda: torch.matmul(a, b, out=ref), warmup=25, rep=100, return_mode="median"))
print(json.dumps({"candidate_ms": statistics.median(cand), "torch_matmul_ms": statistics.median(mm)}))
"""


def launch_style(source: str) -> str:
    """How the kernel reaches the GPU: its own `__global__`, or a CUTLASS device-level adapter."""
    if "__global__" in source:
        return "own __global__"
    if "GemmUniversalAdapter" in source or "device::Gemm" in source:
        return "CUTLASS device API"
    return "other"


def do_bench_artifact(build: Build, spec: HgemmSpec, where: Path) -> dict[str, float] | None:
    """do_bench of the built kernel and of torch.matmul on the same inputs, in a process of its own."""
    so = unpack_artifact(build.artifact, build.artifact_name, where)
    res = subprocess.run([sys.executable, "-c", _DO_BENCH, str(so), str(spec.m), str(spec.n), str(spec.k)],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"do_bench of {so} failed: {res.stderr[-800:]}", flush=True)
        return None


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}" if v < 10 else f"{v:.1f}"
    return "-" if v is None else str(v)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs" / "h200.yaml"))
    ap.add_argument("--suite", default="hgemm/fp32")
    ap.add_argument("--candidates", required=True, help="directory of kernel files named M_N_K.cu")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--limit", type=int, default=None, help="only the first N matched files")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pairs, unmatched = match_candidates(load_suite(args.suite), Path(args.candidates))
    for f in unmatched:
        print(f"note: {f} matches no task of {args.suite}", file=sys.stderr)
    pairs = pairs[: args.limit] if args.limit else pairs
    sources = [(task, path.read_text()) for task, path in pairs]
    t0 = time.monotonic()
    builds = prebuild(sources, cfg, args.jobs)
    build_wall = time.monotonic() - t0
    report: dict[str, Any] = {"jobs": args.jobs, "kernels": len(pairs), "build_wall_s": build_wall,
                              "built": sum(b.ok for b in builds),
                              "build_s_per_kernel": {p.name: b.seconds for (_, p), b in zip(pairs, builds)}}
    print(f"build phase: {len(pairs)} kernels, {args.jobs} jobs, {build_wall:.1f} s wall, "
          f"{report['built']} built", flush=True)
    rows: list[dict[str, Any]] = []
    report["rows"] = rows
    (out / "corpus.json").write_text(json.dumps(report, indent=1))   # a run cut short keeps its builds
    if not args.build_only:
        evaluator = Evaluator(cfg.eval)
        for (task, path), (_, source), build in zip(pairs, sources, builds):
            m = evaluator.evaluate(task, source, build if build.key else None)
            row: dict[str, Any] = {
                "kernel": path.name, "launch": launch_style(source), "verdict": m.rejected or "correct",
                "build_path": m.extra.get("build_path"), "ours_ms": m.candidate_ms, "best_baseline": m.baseline,
                "best_baseline_ms": m.baseline_ms, "speedup": m.speedup,
                "ours_torch_matmul_ms": m.baselines_ms.get("torch_matmul"),
                "launches": {k: v for k, v in (m.extra.get("launches") or {}).items() if k != "foreign_names"},
                "detail": "" if m.correct else m.detail[:160].replace("\n", " ")}
            if m.correct and task.hgemm is not None:
                ref = do_bench_artifact(build, task.hgemm, Path(cfg.eval.build.cache_dir) / "corpus" / path.stem)
                if ref:
                    row.update(do_bench_ms=ref["candidate_ms"], do_bench_torch_matmul_ms=ref["torch_matmul_ms"],
                               ours_vs_do_bench=m.candidate_ms / ref["candidate_ms"],
                               speedup_vs_matmul_ours=row["ours_torch_matmul_ms"] / m.candidate_ms
                               if row["ours_torch_matmul_ms"] else None,
                               speedup_vs_matmul_do_bench=ref["torch_matmul_ms"] / ref["candidate_ms"])
            rows.append(row)
            print(json.dumps(row), flush=True)
            (out / "corpus.json").write_text(json.dumps(report, indent=1))
    cols = ["kernel", "launch", "verdict", "ours_ms", "best_baseline", "speedup", "do_bench_ms", "ours_vs_do_bench",
            "speedup_vs_matmul_ours", "speedup_vs_matmul_do_bench"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    ratios = [r["ours_vs_do_bench"] for r in rows if r.get("ours_vs_do_bench")]
    summary = (f"build phase {build_wall:.1f} s with {args.jobs} jobs for {len(pairs)} kernels; "
               f"{sum(r['verdict'] == 'correct' for r in rows)}/{len(rows)} correct; "
               f"ours/do_bench median {statistics.median(ratios):.3f}" if ratios else
               f"build phase {build_wall:.1f} s with {args.jobs} jobs for {len(pairs)} kernels")
    (out / "corpus.md").write_text("\n".join(lines) + "\n\n" + summary + "\n")
    print("\n".join(lines) + "\n\n" + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
