"""Rollout pipeline throughput and idle ratios as the compile pool and the timers scale.

    python benchmarks/pipeline.py --out DIR [--config configs/local.yaml] [--task ID]
                                  [--combos 1x1,2x1,2x2] [--groups 6] [overrides...]

Each combo `CxT` runs `rl-kernels rollout` (the real driver, real Ray actors, real builds and
evaluations) with C compile actors and T timers on the same work: `--groups` groups of
`policy.group_size` completions for one task, plain prompts (no seed phase).

The policy is a tiny Llama trained here, for real, to answer with the task's seed kernel carrying
one of `--variants` random comment lines (tests/tiny_model.py): every completion then parses and
most are distinct sources, so each one costs a real build and a real evaluation, as a capable
policy's would. (A base model of this size writes no compilable kernels, so the compile pool and
timers would sit idle and the benchmark would measure nothing.)

Writes DIR/pipeline.json and DIR/pipeline.md: candidates/min, evaluated/min, compile pool and
timer utilisation, the timers' timed fraction, generator utilisation, how long the producer was
held back by the buffer, and the wall time per combo.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from rl_kernels.cluster.driver import Driver  # noqa: E402
from rl_kernels.cluster.search import SearchStage  # noqa: E402
from rl_kernels.config import load_config  # noqa: E402
from rl_kernels.prompts.parsing import code_language  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402
from rl_kernels.trajectories import read_groups  # noqa: E402
from tiny_model import save_memorizing_llama  # noqa: E402

ANSWER = """### Performance analysis
The reference is memory bound; one pass over the data is the floor.

### Algorithm design
One thread per element, contiguous accesses.

### Code
```{language}
{comment}
{source}```
"""


def answers(task_id: str, backend: str, n: int) -> list[str]:
    """The task's seed kernel under n different comment lines: n distinct kernels to build.

    The comment goes into the compiled code itself (the build cache keys a module candidate by the
    C++/CUDA sources it passes to load_inline, so a Python comment would not make a new build)."""
    task = get_task(task_id)
    source = task.seeds[backend]
    source = source if source.endswith("\n") else source + "\n"
    language = code_language(task, backend)
    out = []
    for k in range(n):
        comment = f"// pipeline benchmark variant {k:04d}"
        if language == "python":   # first line of the first C++ source string
            head, sep, tail = source.partition('r"""\n')
            if not sep:
                raise ValueError(f"{task_id}: the seed has no r\"\"\" C++ source string to mark")
            body = head + sep + comment + "\n" + tail
            out.append(ANSWER.format(language=language, comment="", source=body).replace("```python\n\n", "```python\n"))
        else:
            out.append(ANSWER.format(language=language, comment=comment, source=source))
    return out


def run_combo(config: str | None, overrides: list[str], out: Path, compilers: int, timers: int) -> dict[str, Any]:
    run_dir = out / f"run_c{compilers}_t{timers}"
    # Its own sampling seed per combo: the same seed would draw the same kernels again and the
    # shared build cache (kept for the torch header PCH) would leave the later combos nothing to build.
    cfg = load_config(config, [*overrides, f"cluster.num_compilers={compilers}", f"cluster.num_timers={timers}",
                               f"run_dir={run_dir}", f"rollout.seed={1000 * compilers + timers}"])
    t0 = time.monotonic()
    s = Driver(SearchStage, cfg, progress=False).run()
    p = s["pipeline"]
    return {"compilers": compilers, "timers": timers, "groups": s["groups"], "candidates": s["completions"],
            "compiled": s["compiled"], "correct": s["correct"], "wall_s": time.monotonic() - t0,
            "candidates_per_min": p["pipeline/candidates_per_min"],
            "evaluated_per_min": p["pipeline/evaluated_per_min"],
            "compile_util": p["pipeline/util/compilers"], "timer_util": p["pipeline/util/timers"],
            "timer_timed_fraction": p["pipeline/timer_timed_fraction"],
            "generator_util": p["pipeline/util/generators"],
            "producer_blocked": p["pipeline/idle/producer_blocked"],
            "build_cache_hits": sum(t.measurement.build_cached for _, g in read_groups(run_dir / "trajectories.jsonl")
                                    for t in g.trajectories if t.measurement is not None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    ap.add_argument("--task", default="builtin/scale_bias_relu")
    ap.add_argument("--combos", default="1x1,2x1,2x2")
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--variants", type=int, default=256)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = load_config(args.config, args.overrides)
    t0 = time.monotonic()
    model = save_memorizing_llama(out / "policy", answers(args.task, base.eval.backend, args.variants))
    train_s = time.monotonic() - t0
    overrides = [*args.overrides, f"policy.model={model}", f"rollout.tasks=[{args.task}]",
                 f"rollout.max_groups={args.groups}", "prompts.mode=plain", "metrics.wandb=false"]
    rows = []
    for combo in args.combos.split(","):
        c, t = (int(x) for x in combo.split("x"))
        rows.append(run_combo(args.config, overrides, out, c, t))
        (out / "pipeline.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                                       "task": args.task, "backend": base.eval.backend,
                                                       "policy_train_s": train_s, "rows": rows}, indent=1))
    cols = list(rows[0])
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |"
           for r in rows]
    (out / "pipeline.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
