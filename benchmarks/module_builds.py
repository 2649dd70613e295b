"""How long a module candidate takes to build on a cache miss, per header path, in one run.

    python benchmarks/module_builds.py --backend cuda [--paths slim,torch] [--tasks builtin/softmax,...] \\
        [--files CANDIDATE.py,...] [--out builds.json] [overrides]

For every path (`slim`: the CUDA file against the slim torch headers first, `eval.build.slim_torch_headers`
true; `torch`: torch's own headers always) the built-in seeds of the backend (or the module candidate
files `--files` names, e.g. the hack suite's) are built one after the other into that path's own
empty cache dir.  The precompiled binding header is built once per cache
dir before the first timed build (its time is printed apart: it is paid once per toolchain and
flags, not per candidate).  Each seed's CUDA source gets a unique comment, so every timed build is
a miss.  Prints one line per build and a table per path: median, p90, which headers each build
ended on, and the outcome.  On a torch without CUDA the builds compile but cannot link (the
outcome says so); the compile is what is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval_throughput import quantile  # noqa: E402
from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.evaluation.build import build_candidate  # noqa: E402
from rl_kernels.tasks import get_task, load_suite  # noqa: E402
from rl_kernels.types import Task  # noqa: E402


def _unique(source: str, tag: str) -> str:
    """The same candidate with a comment in its first raw string (the CUDA or C++ source)."""
    return source.replace('r"""', f'r"""\n// {tag}\n', 1)


def _outcome(build) -> str:  # noqa: ANN001 - a Build
    if build.ok:
        return "ok"
    return "compiled, cannot link here" if "cannot be linked" in build.log else (build.reason or "failed")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=None)
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--paths", default="slim,torch")
    ap.add_argument("--tasks", default=None, help="comma-separated task ids (default: the built-in suite)")
    ap.add_argument("--files", default=None, help="comma-separated module candidate files, built instead of seeds")
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.files:
        files = [Path(f) for f in args.files.split(",")]
        builds = [(Task(id=f"file/{f.stem}", kind="module"), f.read_text()) for f in files]
    else:
        tasks = [get_task(t) for t in args.tasks.split(",")] if args.tasks else load_suite("builtin")
        builds = [(task, task.seeds[args.backend]) for task in tasks]
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlk-module-builds-") as scratch:
        for path in args.paths.split(","):
            if path not in ("slim", "torch"):
                raise SystemExit(f"--paths: unknown path {path!r} (slim, torch)")
            cfg = load_config(args.config, [*args.overrides, f"eval.backend={args.backend}",
                                            f"eval.build.cache_dir={scratch}/{path}",
                                            f"eval.build.slim_torch_headers={path == 'slim'}"]).eval.build
            t0 = time.monotonic()
            warm = build_candidate(builds[0][0], _unique(builds[0][1], f"warm-up {time.time()}"), args.backend, cfg)
            print(f"{path}: first build, with the precompiled binding header: {time.monotonic() - t0:.1f} s "
                  f"({_outcome(warm)})", flush=True)
            times = []
            for task, source in builds:
                t0 = time.monotonic()
                build = build_candidate(task, _unique(source, f"{path} {time.time()}"), args.backend, cfg)
                seconds = time.monotonic() - t0
                times.append(seconds)
                rows.append({"path": path, "task": task.id, "seconds": seconds, "headers": build.path,
                             "outcome": _outcome(build)})
                print(f"{path} {task.id}: {seconds:.1f} s, headers {build.path}, {_outcome(build)}", flush=True)
            ended = {h: sum(1 for r in rows if r["path"] == path and r["headers"] == h) for h in ("slim", "torch")}
            outcomes = sorted({r["outcome"] for r in rows if r["path"] == path})
            rows.append({"path": path, "summary": True, "builds": len(times), "median_s": statistics.median(times),
                         "p90_s": quantile(times, 0.9), "ended_on": ended, "outcomes": outcomes})
    print("| path | builds | median s | p90 s | ended on slim / torch headers | outcomes |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r.get("summary"):
            print(f"| {r['path']} | {r['builds']} | {r['median_s']:.1f} | {r['p90_s']:.1f} | "
                  f"{r['ended_on']['slim']} / {r['ended_on']['torch']} | {', '.join(r['outcomes'])} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
