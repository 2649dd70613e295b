"""A run's best kernels, measured again, and whether each is the policy's own or a warm-start program.

    python benchmarks/best_kernels.py RUN_DIR [--config FILE] [--out DIR] [--backend cuda|cpu] [--reps N]
        [--copy-threshold 0.95] [--variant-threshold 0.7] [--no-rename] [--jobs N] [overrides]

Per task, the fastest kernel the policy wrote that entered the run's archive (only kernels that passed
every gate do: `passed_every_gate`); the seed, archived at the run's start with policy version -1, is
not the policy's and is never picked. Each is written to OUT/candidates/ under its task's name, then:
  - `rl-kernels bench` evaluates them --reps times with the config OUT/config.yaml (the run's, with the
    overrides), appending to OUT/bench.jsonl: the command is printed, so a reviewer can run it again;
  - on cuda, benchmarks/ladder.py's direct mode times each (module tasks) beside the eager Model with
    triton's do_bench, outside the evaluator's sandbox and timing code, --reps times;
  - rl_kernels/novelty.py finds its nearest ladder rung or seed and says copy / variant / new.
Prints the table (task | version | archived speedup | bench speedup | do_bench speedup | bench vs
do_bench % | nearest rung | similarity | verdict) and writes it to OUT/best_kernels.md, every figure
(each repetition too) to OUT/best_kernels.json. Default OUT: RUN_DIR/best_kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_kernels import cli  # noqa: E402
from rl_kernels.archive import ArchivedKernel, KernelArchive  # noqa: E402
from rl_kernels.config import Config, ConfigError, dump_config, load_config  # noqa: E402
from rl_kernels.novelty import COPY_THRESHOLD, VARIANT_THRESHOLD, Novelty, judge, task_references  # noqa: E402
from rl_kernels.rollout import SEED_POLICY_VERSION  # noqa: E402
from rl_kernels.run_dir import CONFIG_FILE, load_run_config  # noqa: E402
from rl_kernels.tasks import TaskError, load_suite  # noqa: E402
from rl_kernels.tasks.ladder import Rung  # noqa: E402
from rl_kernels.types import Task  # noqa: E402

ARCHIVE_FILE = "archive.sqlite"
HEAD = ("task", "version", "archived speedup", "bench speedup", "do_bench speedup", "bench vs do_bench %",
        "nearest rung", "similarity", "verdict")


@dataclass
class Row:
    """One task's best policy kernel and what was found about it."""

    task: str
    version: int
    sha256: str
    candidate: str                    # its file under OUT/candidates
    archived_speedup: float           # the best of its `submissions` measurements in the run, so it reads high
    archived_baseline: str | None
    submissions: int
    bench_speedups: list[float | None]        # per repetition; None: the evaluator refused it that time
    bench_baselines: list[str | None]
    bench_rejected: list[str | None]
    bench_eager_speedups: list[float | None]  # the same measurements against eager, what do_bench compares
    do_bench_speedups: list[float | None]     # cuda only; None: the direct check failed that time
    do_bench_detail: str                      # why the direct check failed, when it did
    novelty: Novelty


def best_policy_kernels(archive_path: Path, backend: str) -> tuple[list[ArchivedKernel], list[str]]:
    """Per task of the archive, its fastest kernel of a policy version (not the seed), and the tasks
    whose only archived kernel on this backend is the seed.

    The archive admits only kernels that passed every gate, so every row is one that did."""
    if not archive_path.is_file():
        raise ConfigError(f"{archive_path} does not exist: not a run directory, or the run archived nothing")
    best, seed_only = [], []
    with KernelArchive(archive_path) as archive:
        for task_id in archive.tasks():
            rows = archive.kernels(task_id, backend)
            policy = [k for k in rows if k.policy_version != SEED_POLICY_VERSION]
            if policy:
                best.append(policy[0])
            elif rows:
                seed_only.append(task_id)
    return best, seed_only


def resolve_config(run: Path, config: str | None, overrides: list[str]) -> Config:
    """The run's own config.yaml (its paths following a moved run directory), or --config as the
    base, then the overrides: what `rl-kernels heldout RUN_DIR` resolves."""
    if config is None:
        return load_run_config(run, overrides, _progress)
    if not (run / CONFIG_FILE).is_file():
        raise ConfigError(f"{run}: no {CONFIG_FILE} there, so it is not a run directory")
    return load_config(config, [*overrides, f"run_dir={run}"])


def suite_tasks(suite: str, task_ids: list[str]) -> dict[str, Task]:
    """The archived tasks as the run's suite defines them (the bench matches against that suite)."""
    by_id = {t.id: t for t in load_suite(suite)}
    missing = [t for t in task_ids if t not in by_id]
    if missing:
        raise ConfigError(f"archived task(s) {missing} are not in the config's suite {suite!r}: pass the "
                          "run's config (or suite=...)")
    return {t: by_id[t] for t in task_ids}


def candidate_name(task: Task, backend: str) -> str:
    """The file name `rl-kernels bench` pairs with the task (`match_candidates`): the task id after
    its suite's part (`builtin/softmax` -> `softmax.py`, `hgemm/fp32/M_N_K` -> `fp32/M_N_K.cu`)."""
    parts = task.id.split("/")
    stem = "/".join(parts[1:]) if len(parts) > 1 else task.id
    suffix = ".py" if task.kind == "module" else ".cu" if backend == "cuda" else ".cpp"
    return stem + suffix


def write_candidates(kernels: list[ArchivedKernel], tasks: dict[str, Task], folder: Path,
                     backend: str) -> dict[str, Path]:
    """Each kernel's source under `folder`, by task id; the folder is emptied first, so the bench
    sees these kernels alone."""
    shutil.rmtree(folder, ignore_errors=True)
    paths = {}
    for k in kernels:
        path = folder / candidate_name(tasks[k.task_id], backend)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(k.source)
        paths[k.task_id] = path
    check_pairing(paths, tasks, folder)
    return paths


def check_pairing(paths: dict[str, Path], tasks: dict[str, Task], folder: Path) -> None:
    """Each file must pair with its own task by the bench's own rule, or the bench would time a
    kernel against another task (or skip it)."""
    pairs, unmatched = cli.match_candidates(list(tasks.values()), folder)
    paired = {path: task.id for task, path in pairs}
    wrong = [f"{path} -> {paired.get(path, 'no task')}" for task_id, path in paths.items()
             if paired.get(path) != task_id]
    if wrong or unmatched:
        raise RuntimeError(f"candidate files the bench would pair wrongly: {wrong + [str(f) for f in unmatched]}")


def run_bench(cfg: Config, out: Path, reps: int, jobs: int) -> list[dict[str, Any]]:
    """`rl-kernels bench` on OUT/candidates, `reps` times, in this process through the CLI's own entry
    point; every measurement it appended to OUT/bench.jsonl, as JSON."""
    config_path, jsonl = out / "config.yaml", out / "bench.jsonl"
    config_path.write_text(dump_config(cfg))
    jsonl.unlink(missing_ok=True)
    argv = ["bench", "--config", str(config_path), "--suite", cfg.suite, "--candidates", str(out / "candidates"),
            "--out", str(jsonl), "--jobs", str(jobs)]
    _progress("bench: rl-kernels " + " ".join(argv))
    for rep in range(reps):
        with contextlib.redirect_stdout(sys.stderr):   # stdout carries this script's table alone
            rc = cli.main(argv)
        if rc != 0:
            raise RuntimeError(f"rl-kernels bench exited {rc} on repetition {rep + 1} (its error is above)")
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def eager_speedup(m: dict[str, Any]) -> float | None:
    """The bench measurement's speedup against eager, the baseline do_bench times: its own speedup
    when eager was its best baseline, else eager's time over the candidate's."""
    if m.get("speedup") is None:
        return None
    if m.get("baseline") == "eager":
        return m["speedup"]
    eager_ms, candidate_ms = m.get("baselines_ms", {}).get("eager"), m.get("candidate_ms")
    return eager_ms / candidate_ms if eager_ms and candidate_ms else None


def _ladder_module() -> ModuleType:
    """benchmarks/ladder.py, whose direct mode (build in a child, check against float64, time with
    do_bench beside eager) is the independent timing used here."""
    spec = importlib.util.spec_from_file_location("benchmarks_ladder", REPO / "benchmarks" / "ladder.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def direct_timings(kernels: list[ArchivedKernel], tasks: dict[str, Task], reps: int,
                   jobs: int) -> dict[str, list[dict[str, Any]]]:
    """Per task id, benchmarks/ladder.py's direct-mode row (verdict, speedup over eager by do_bench)
    of each repetition on cuda. hgemm kernels are left out: the direct check runs module programs."""
    ladder = _ladder_module()
    rungs = [Rung(tasks[k.task_id], "cuda", f"v{k.policy_version}", k.source, "")
             for k in kernels if tasks[k.task_id].kind == "module"]
    found: dict[str, list[dict[str, Any]]] = {r.task.id: [] for r in rungs}
    for _ in range(reps):
        for row in ladder._direct_rows(rungs, "cuda", jobs, _progress, lambda rows: None):
            found[row["task"]].append(row)
    return found


def build_rows(kernels: list[ArchivedKernel], tasks: dict[str, Task], paths: dict[str, Path],
               measured: list[dict[str, Any]], timed: dict[str, list[dict[str, Any]]],
               backend: str, args: argparse.Namespace) -> list[Row]:
    """One row per kernel: what the archive, the bench and do_bench said, and the novelty verdict."""
    rows = []
    for k in kernels:
        ms = [m for m in measured if m["task"] == k.task_id]
        direct = timed.get(k.task_id, [])
        novelty = judge(k.source, task_references(tasks[k.task_id], backend), copy_threshold=args.copy_threshold,
                        variant_threshold=args.variant_threshold, rename=args.rename)
        rows.append(Row(k.task_id, k.policy_version, k.sha256, str(paths[k.task_id]), k.speedup, k.baseline,
                        k.submissions,
                        [m.get("speedup") for m in ms], [m.get("baseline") for m in ms],
                        [m.get("rejected") for m in ms], [eager_speedup(m) for m in ms],
                        [d.get("speedup") if d["verdict"] == "correct" else None for d in direct],
                        next((d["detail"] for d in direct if d.get("detail")), ""), novelty))
    return rows


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _median(values: list[float | None]) -> float | None:
    """The median of the repetitions that gave a figure; None when none did."""
    given = [v for v in values if v is not None]
    return statistics.median(given) if given else None


def _speedup_cell(values: list[float | None], refusals: list[str | None] | None = None,
                  baselines: list[str | None] | None = None) -> str:
    """`1.234x` (the median), `1.234x (1.20-1.27)` over several repetitions, the refusals counted, and
    the baseline named when it was not eager (the bench takes the fastest configured baseline)."""
    median = _median(values)
    if median is None:
        reasons = sorted({r for r in refusals or [] if r})
        return ("refused: " + ", ".join(reasons)) if reasons else "-"
    given = [v for v in values if v is not None]
    cell = f"{median:.3f}x" + (f" ({min(given):.2f}-{max(given):.2f})" if len(given) > 1 else "")
    others = sorted({b for b in baselines or [] if b and b != "eager"})
    cell += f" vs {'/'.join(others)}" if others else ""
    missing = len(values) - len(given)
    return cell + (f", {missing} of {len(values)} refused" if missing else "")


def _difference(row: Row) -> str:
    """How far the evaluator's speedup over eager lies from do_bench's, in percent of do_bench's."""
    bench, direct = _median(row.bench_eager_speedups), _median(row.do_bench_speedups)
    return f"{(bench / direct - 1) * 100:+.1f}" if bench and direct else "-"


def table(rows: list[Row]) -> str:
    """The markdown table, one row per task."""
    lines = [HEAD]
    for r in rows:
        n = r.novelty
        lines.append((r.task, f"v{r.version}", f"{r.archived_speedup:.3f}x",
                      _speedup_cell(r.bench_speedups, r.bench_rejected, r.bench_baselines),
                      _speedup_cell(r.do_bench_speedups),
                      _difference(r), n.nearest or "-", f"{n.similarity:.3f}", n.verdict))
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEAD))]
    cells = ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |" for line in lines]
    return "\n".join([cells[0], "|" + "|".join("-" * (w + 2) for w in widths) + "|", *cells[1:]])


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: a similarity threshold lies in (0, 1]")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="RUN_DIR", help="run directory (holds archive.sqlite and config.yaml)")
    ap.add_argument("--config", help="base config instead of the run's own config.yaml")
    ap.add_argument("--out", help="output directory (default: RUN_DIR/best_kernels)")
    ap.add_argument("--backend", choices=["cpu", "cuda"],
                    help="the archive's kernels of this backend, measured on it (default: the run's eval.backend)")
    ap.add_argument("--reps", type=_positive_int, default=3,
                    help="independent measurements of each kernel, by the bench and (cuda) by do_bench; the "
                         "table shows their median and range, so one disturbed measurement cannot set the figure")
    ap.add_argument("--copy-threshold", type=_fraction, default=COPY_THRESHOLD,
                    help="similarity at or above which a kernel is a copy of its nearest rung. 0.95: two cpu "
                         "rungs that differ only by one `#pragma omp parallel for` line and its build flags "
                         "score 0.98-0.99, a rung with one loop nest rewritten about 0.88-0.95, and a program of "
                         "another task reaches 0.95 against a task's ladder in about 1%% of pairs (twin tasks "
                         "such as gemm_bias_relu and linear_gelu_scale)")
    ap.add_argument("--variant-threshold", type=_fraction, default=VARIANT_THRESHOLD,
                    help="similarity at or above which a kernel is a variant of its nearest rung, below it new. "
                         "0.7: a program of another task scores below it against a task's ladder in 90%% of "
                         "pairs (median 0.54, cpu and cuda alike), while a rung's nearest neighbour on its own "
                         "ladder scores a median 0.93 (cpu) and 0.80 (cuda)")
    ap.add_argument("--rename", action=argparse.BooleanOptionalAction, default=True,
                    help="also compare with identifiers renamed by first appearance, so a renamed copy still "
                         "reads as a copy (--no-rename: names as written)")
    ap.add_argument("--jobs", type=_positive_int, default=len(os.sched_getaffinity(0)),
                    help="parallel builds of the bench and of do_bench's direct check (default: every core)")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. eval.timing.samples=50")
    args = ap.parse_args(argv)
    if args.variant_threshold > args.copy_threshold:
        ap.error(f"--variant-threshold {args.variant_threshold} is above --copy-threshold {args.copy_threshold}")
    return args


def measure(args: argparse.Namespace) -> tuple[list[Row], list[str], Path]:
    """Everything the table needs: the kernels picked, written, benched, timed (cuda) and judged."""
    run = Path(args.run)
    overrides = [*args.overrides, *([f"eval.backend={args.backend}"] if args.backend else [])]
    cfg = resolve_config(run, args.config, overrides)
    backend = cfg.eval.backend
    out = Path(args.out) if args.out else run / "best_kernels"
    kernels, seed_only = best_policy_kernels(run / ARCHIVE_FILE, backend)
    if not kernels:
        raise ConfigError(f"{run / ARCHIVE_FILE} holds no {backend} kernel of the policy (only seeds: "
                          f"{', '.join(seed_only) or 'none'})")
    tasks = suite_tasks(cfg.suite, [k.task_id for k in kernels])
    paths = write_candidates(kernels, tasks, out / "candidates", backend)
    measured = run_bench(cfg, out, args.reps, args.jobs)
    timed = direct_timings(kernels, tasks, args.reps, args.jobs) if backend == "cuda" else {}
    return build_rows(kernels, tasks, paths, measured, timed, backend, args), seed_only, out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rows, seed_only, out = measure(args)
    except (ConfigError, TaskError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = table(rows)
    if seed_only:
        text += f"\n\nno kernel of the policy archived for: {', '.join(seed_only)} (the seed only)"
    print(text)
    (out / "best_kernels.md").write_text(text + "\n")
    (out / "best_kernels.json").write_text(json.dumps(
        {"run": args.run, "reps": args.reps, "copy_threshold": args.copy_threshold,
         "variant_threshold": args.variant_threshold, "rename": args.rename, "seed_only": seed_only,
         "rows": [asdict(r) for r in rows]}, indent=1))
    print(f"written: {out / 'best_kernels.md'}, {out / 'best_kernels.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
