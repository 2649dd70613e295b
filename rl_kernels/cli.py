"""`rl-kernels` command line: eval | build | tasks | bench | export | rollout | train | sft | selftrain | heldout | compare | report.

Every subcommand but `report` takes `--config FILE` plus dotted overrides (`eval.timing.samples=50`)
and `--dry-run`, which prints the resolved config (and, for rollout, train and selftrain, the
placement plan) and exits. `train --resume RUN_DIR` starts from
the run's own config.yaml, so only what changes (say, train.max_steps) needs an override.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rl_kernels.config import Config, ConfigError, dump_config, load_config
from rl_kernels.placement import PlacementError, PlacementPlan, described_nodes, local_node, plan_placement
from rl_kernels.run_dir import CONFIG_FILE, load_run_config
from rl_kernels.tasks.module import TaskError
from rl_kernels.types import Build, Measurement, Task

if TYPE_CHECKING:   # the warm start's modules load only for a train job that runs one
    from rl_kernels.learner.warm_start_cache import WarmStart

CANDIDATE_SUFFIXES = (".py", ".cu", ".cpp", ".cc")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML config file (defaults: built-in defaults)")
    p.add_argument("--backend", choices=["cpu", "cuda"], help="shortcut for eval.backend=...")
    p.add_argument("--mode", choices=["kernel", "offline", "server"], help="shortcut for eval.timing.mode=...")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config (and where every actor would run) and exit")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.timing.samples=50")


# The commands that start the producer graph on Ray, and whether it has a learner actor.
_GRAPH_COMMANDS = {"rollout": False, "train": True, "selftrain": False, "compare": False}


def _dry_run_plan(cfg: Config, *, learner: bool) -> PlacementPlan:
    """The placement plan for `cluster.nodes`, else for the running cluster at `cluster.ray_address`,
    else for this machine as a local Ray would see it; PlacementError when the actors do not fit."""
    if cfg.cluster.nodes is None and cfg.cluster.ray_address:
        from rl_kernels.cluster.graph import plan_for_running_cluster   # Ray: only here, never in the library

        return plan_for_running_cluster(cfg, learner=learner)
    return plan_placement(cfg, described_nodes(cfg, os.cpu_count() or 1, _visible_gpus(), learner=learner),
                          learner=learner)


def _check_fits_this_machine(cfg: Config, *, learner: bool) -> None:
    """A local Ray's graph must fit this machine's cores and GPUs: PlacementError before stage 1 or
    any actor spends time (the driver plans again on the live Ray)."""
    plan_placement(cfg, [local_node(cfg, os.cpu_count() or 1, _visible_gpus(), learner=learner)], learner=learner)


def _visible_gpus() -> int:
    """GPUs a local Ray would detect here (counted by the driver, not by starting CUDA)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    return len([d for d in Path("/dev").glob("nvidia[0-9]*")])


def _resolve(args: argparse.Namespace) -> Config:
    """The command's config. Given a run directory (`--resume DIR`, `heldout DIR`) it starts from the
    run's own config.yaml, whose paths inside the run directory follow it when it moved
    (rl_kernels/run_dir.py), unless --config names another base."""
    overrides = list(args.overrides)
    if args.backend:
        overrides.append(f"eval.backend={args.backend}")
    if args.mode:
        overrides.append(f"eval.timing.mode={args.mode}")
    run_arg = getattr(args, "resume_dir", None) or getattr(args, "run", None)
    if not run_arg:
        return load_config(args.config, overrides)
    run = Path(run_arg)
    if not args.config:   # stderr: `heldout --json` prints its result on stdout
        return load_run_config(run, overrides, lambda line: print(line, file=sys.stderr, flush=True))
    if not (run / CONFIG_FILE).is_file():
        raise ConfigError(f"{run}: no {CONFIG_FILE} there, so it is not a run directory")
    return load_config(args.config, [*overrides, f"run_dir={run}"])


def _measurement_line(m: Measurement) -> str:
    if m.rejected:
        return f"{m.task}: REJECTED ({m.rejected}) {m.detail.splitlines()[0] if m.detail else ''}"
    line = (f"{m.task}: correct, candidate {m.candidate_ms:.4f} ms vs {m.baseline} {m.baseline_ms:.4f} ms "
            f"-> speedup {m.speedup:.3f}x (noise {m.noise:.3f}), reward {m.reward:.3f}")
    return f"{line}\n  {m.detail}" if m.detail else line    # why the speed was not paid (unstable, drift)


def cmd_eval(args: argparse.Namespace, cfg: Config) -> int:
    from rl_kernels.evaluation.evaluator import Evaluator
    from rl_kernels.tasks import get_task

    task = get_task(args.task)
    m = Evaluator(cfg.eval).evaluate(task, _candidate_file(args.candidate).read_text())
    if args.json:
        print(json.dumps(m.to_json()))
    else:
        print(_measurement_line(m))
        if m.rejected and m.detail:
            print(m.detail[-3000:])
    return 0


def _candidate_file(path: str) -> Path:
    source_path = Path(path)
    if not source_path.is_file():
        raise ConfigError(f"candidate file {source_path} does not exist")
    return source_path


def cmd_build(args: argparse.Namespace, cfg: Config) -> int:
    """The static gate and the build only (what the compile pool does): no GPU needed."""
    from rl_kernels.evaluation.build import gated_build
    from rl_kernels.tasks import get_task

    task = get_task(args.task)
    build = gated_build(task, _candidate_file(args.candidate).read_text(), cfg.eval)
    gated = build.key == "" and not build.ok
    result = {"task": task.id, "backend": cfg.eval.backend, "gate": build.reason if gated else None,
              "compiled": build.ok, "reason": build.reason, "build_path": build.path or None,
              "build_seconds": build.seconds, "cached": build.cached, "log": build.log[-2000:]}
    if args.json:
        print(json.dumps(result))
    else:
        state = "built" if build.ok else f"REFUSED ({build.reason})"
        print(f"{task.id}: {state} in {build.seconds:.1f} s{' (cached)' if build.cached else ''}, "
              f"against the {result['build_path']} headers")
        if not build.ok:
            print(build.log[-3000:])
    return 0 if build.ok else 1


def prebuild(pairs: list[tuple[Task, str]], cfg: Config, jobs: int) -> list[Build]:
    """Gate and build every candidate in a process pool (the compile pool's job), with a progress bar."""
    from tqdm import tqdm

    from rl_kernels.evaluation.build import build_many

    with tqdm(total=len(pairs), desc=f"build ({jobs} jobs)", unit="kernel", file=sys.stderr) as bar:
        return build_many(pairs, cfg.eval, jobs, on_done=bar.update)


def cmd_tasks(args: argparse.Namespace, cfg: Config) -> int:
    from rl_kernels.tasks import list_suites, load_suite

    suites = [args.suite] if args.suite else list_suites()
    for suite in suites:
        tasks = load_suite(suite)
        print(f"# {suite}: {len(tasks)} tasks")
        for t in tasks[: args.limit] if args.limit else tasks:
            print(f"{t.id}\t{t.kind}\t{t.description}")
    return 0


def match_candidates(tasks: list[Task], directory: Path) -> tuple[list[tuple[Task, Path]], list[Path]]:
    """Pair candidate files with tasks by the last part(s) of the task id (`softmax.py`, `1024_1024_1024.cu`)."""
    by_key: dict[str, Task] = {}
    for t in tasks:
        parts = t.id.split("/")
        for i in range(len(parts)):
            by_key.setdefault("/".join(parts[i:]), t)
    pairs, unmatched = [], []
    for f in sorted(p for p in directory.rglob("*") if p.suffix in CANDIDATE_SUFFIXES and p.is_file()):
        rel = f.relative_to(directory).with_suffix("").as_posix()
        task = by_key.get(rel) or by_key.get(f.stem)
        if task is None:
            unmatched.append(f)
        else:
            pairs.append((task, f))
    return pairs, unmatched


def cmd_bench(args: argparse.Namespace, cfg: Config) -> int:
    from tqdm import tqdm

    from rl_kernels.evaluation.evaluator import Evaluator, summarize
    from rl_kernels.tasks import load_suite

    suite = args.suite or cfg.suite
    tasks = load_suite(suite)
    if args.seeds:
        pairs = [(t, None) for t in tasks if cfg.eval.backend in t.seeds]
        unmatched: list[Path] = []
    else:
        if not args.candidates:
            raise ConfigError("bench needs --candidates DIR (one kernel file per task) or --seeds")
        directory = Path(args.candidates)
        if not directory.is_dir():
            raise ConfigError(f"--candidates {directory} is not a directory")
        pairs, unmatched = match_candidates(tasks, directory)
        if not pairs:
            raise ConfigError(f"no file in {directory} matches a task of suite {suite!r}")
    if args.limit:
        pairs = pairs[: args.limit]
    sources = [(task, task.seeds[cfg.eval.backend] if path is None else path.read_text()) for task, path in pairs]
    builds = prebuild(sources, cfg, args.jobs or max(1, len(os.sched_getaffinity(0))))
    evaluator = Evaluator(cfg.eval)
    out = Path(args.out) if args.out else None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
    results: list[Measurement] = []
    bar = tqdm(list(zip(sources, builds)), desc=f"bench {suite}", unit="task", file=sys.stderr)
    for (task, source), build in bar:
        m = evaluator.evaluate(task, source, build if build.key else None)
        results.append(m)
        best = max((r.speedup or 0) for r in results if r.correct) if any(r.correct for r in results) else 0
        bar.set_postfix(correct=sum(r.correct for r in results), best=f"{best:.2f}x")
        if out:
            with out.open("a") as f:
                f.write(json.dumps(m.to_json()) + "\n")
    print(_table(results))
    summary = summarize(results)
    print(_summary_line(summary))
    for f in unmatched:
        print(f"note: {f} matches no task of {suite}", file=sys.stderr)
    return 0


def _table(results: list[Measurement]) -> str:
    rows = [("task", "result", "candidate ms", "baseline", "baseline ms", "speedup", "reward")]
    for m in results:
        rows.append((m.task, m.rejected or "correct",
                     f"{m.candidate_ms:.4f}" if m.candidate_ms else "-", m.baseline or "-",
                     f"{m.baseline_ms:.4f}" if m.baseline_ms else "-",
                     f"{m.speedup:.3f}" if m.speedup else "-", f"{m.reward:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def _summary_line(s: dict[str, Any]) -> str:
    geo = f"{s['geomean_speedup']:.3f}x" if s["geomean_speedup"] else "-"
    med = f"{s['median_speedup']:.3f}x" if s["median_speedup"] else "-"
    return (f"summary: {s['correct']}/{s['tasks']} correct ({s['compiled']} compiled), geomean {geo}, "
            f"median {med}, fast_1.0 {s['fast_1.0']:.2f}, fast_1.2 {s['fast_1.2']:.2f}, rejected {s['rejected']}")


def cmd_export(args: argparse.Namespace, cfg: Config) -> int:
    import torch

    from rl_kernels.ops import LibraryError
    from rl_kernels.ops import export as ex

    device = torch.device(args.device or ("cuda" if cfg.eval.backend == "cuda" else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA device is visible here")
    try:
        if args.verify:
            rows = ex.verify(Path(args.verify), cfg, device)
            print("| M | N | K | acc | path | speedup at export | speedup now | capturable at export / now | holds |")
            print("|---|---|---|---|---|---|---|---|---|")
            for r in rows:
                capture = f"{r['capturable']} / {r['capturable_now']}" if "capturable_now" in r else "-"
                print(f"| {r['m']} | {r['n']} | {r['k']} | {r['accumulator']} | {r['path']} | {r.get('speedup') or '-'} | "
                      f"{r.get('speedup_now') or '-'} | {capture} | {'yes' if r['holds'] else 'NO: now ' + r['now']} |")
            flipped = sum(not r["holds"] for r in rows)
            print(f"{len(rows) - flipped} of {len(rows)} decisions hold on {device}")
            return 1 if flipped else 0
        if not args.source or not args.out:
            raise ConfigError("export needs --from RUN_DIR|ARCHIVE|KERNEL_DIR and --out DIR (or --verify PACKAGE_DIR)")
        source = Path(args.source)
        if not source.exists():
            raise ConfigError(f"--from {source}: no such file or directory")
        backend = cfg.eval.backend
        name = ex.check_name(args.name or f"rlk_hgemm_{backend}")
        shapes = ex.parse_shapes(args.shapes or "")
        jobs = args.jobs or max(1, len(os.sched_getaffinity(0)))
        if source.is_file() or (source / "archive.sqlite").is_file():
            candidates = ex.from_archive(source, backend)
        else:
            candidates = ex.from_directory(source, args.accumulator, cfg, ex.progress_to_stderr, jobs)
        manifest = ex.export(candidates, Path(args.out), name, cfg, shapes, device, str(source),
                             ex.progress_to_stderr, jobs)
    except LibraryError as exc:
        raise ConfigError(str(exc)) from None
    paths = [p["path"] for p in manifest["plan"]]
    capturable = sum(k["capturable"] is True for k in manifest["kernels"])
    print(f"exported {len(manifest['kernels'])} kernels to {Path(args.out) / name} (pip install {args.out}); plan: "
          + ", ".join(f"{paths.count(p)} {p}" for p in ("exact", "pad", "matmul"))
          + (f"; {capturable} of {len(manifest['kernels'])} kernels capturable in CUDA graphs" if backend == "cuda" else ""))
    return 0


def cmd_rollout(args: argparse.Namespace, cfg: Config) -> int:
    """The producer half on Ray (imported here: the library itself never imports Ray)."""
    from rl_kernels.cluster.driver import Driver, RunDirError
    from rl_kernels.cluster.search import SearchStage

    try:
        summary = Driver(SearchStage, cfg, resume=args.resume, progress=not args.no_progress).run()
    except RunDirError as exc:
        raise ConfigError(str(exc)) from None
    print(_rollout_summary(summary))
    return 0


def _rollout_summary(s: dict[str, Any]) -> str:
    p = s["pipeline"]
    best = s["best_speedup_per_task"]
    lines = [
        f"rollout: {s['groups']} groups, {s['completions']} completions in {s['wall_s']:.0f} s "
        f"({p['pipeline/candidates_per_min']:.1f} candidates/min, {p['pipeline/evaluated_per_min']:.1f} evaluated/min)",
        f"  parsed {s['parsed']}, compiled {s['compiled']}, correct {s['correct']}; "
        f"groups {s['group_status']}",
        f"  utilisation: generators {p['pipeline/util/generators']:.2f}, compilers {p['pipeline/util/compilers']:.2f}, "
        f"timers {p['pipeline/util/timers']:.2f} (timed fraction {p['pipeline/timer_timed_fraction']:.3f}); "
        f"producer blocked {p['pipeline/idle/producer_blocked']:.2f}",
        "  top rejections: " + ", ".join(f"{k} {v}" for k, v in list(s["rejections"].items())[:6]),
        "  best speedup per task: " + (", ".join(f"{t} {x:.2f}x" for t, x in best.items()) or "none correct yet"),
        f"  run directory: {s['run_dir']} (trajectories.jsonl, archive.sqlite, metrics.jsonl, {'rollout_summary.json'})",
    ]
    return "\n".join(lines)


def cmd_train(args: argparse.Namespace, cfg: Config) -> int:
    """Generators, compile pool, timers, buffer and the learner on Ray; ends with a summary and
    the run's report (Ray is imported here: the library itself never imports it)."""
    from rl_kernels.cluster.driver import Driver, RunDirError, refuse_earlier_run
    from rl_kernels.cluster.train import LearnStage
    from rl_kernels.report import write_report

    warm = None
    try:
        if cfg.sft.before_train and cfg.policy.init_adapter is None and not args.resume_dir:
            refuse_earlier_run(Path(cfg.run_dir), resume=False)   # before stage 1 spends its time, not after
            from rl_kernels.learner.warm_start_cache import start_from

            warm = _warm_start_in_run(cfg)
            cfg = start_from(cfg, warm)
        summary = Driver(LearnStage, cfg, resume=bool(args.resume_dir)).run()
    except RunDirError as exc:
        raise ConfigError(str(exc).replace("pass --resume", f"pass --resume {cfg.run_dir}")) from None
    report = write_report(Path(cfg.run_dir))
    if warm:
        start = f"from the warm start {warm.output}"
    elif cfg.policy.init_adapter:
        start = f"from {cfg.policy.model} with the adapter {cfg.policy.init_adapter} merged in"
    else:
        start = f"from {cfg.policy.model} as it is (no warm start in this job)"
    print(_train_summary(summary, report.html, start))
    if warm:
        print("  " + _warm_start_line(warm.report, warm.output, warm.reused))
    return 0


def _warm_start_in_run(cfg: Config) -> WarmStart:
    """Stage 1 from the cache (trained first when it has none for these inputs), placed inside the
    run directory so the run's config never names this machine's cache."""
    from rl_kernels.learner.warm_start_cache import cached_warm_start, place_in_run

    warm = place_in_run(cached_warm_start(cfg, lambda line: print(line, flush=True)), Path(cfg.run_dir))
    print(_warm_start_line(warm.report, warm.output, warm.reused), flush=True)
    return warm


def _warm_start_line(report: dict[str, Any], output: Path, reused: bool) -> str:
    """Stage 1 in one line: what it trained on and what its policy wrote afterwards."""
    samples = report.get("samples")
    rates = (f"its samples {samples['compile_rate']:.0%} compiled, {samples['correct_rate']:.0%} correct "
             f"({samples['sampled']} sampled)" if samples else "not sampled (sft.sample_after=0)")
    losses = report["losses"]
    return (f"stage 1 (warm start{', reused' if reused else ''}): {report['train_examples']} verified examples, "
            f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; after it {rates}; {output}")


def _train_summary(s: dict[str, Any], report: Path, start: str) -> str:
    trend = s["reward_trend"]
    fmt = lambda x: f"{x:.3f}" if x is not None else "-"  # noqa: E731
    best = s["best_speedup_per_task"]
    resumed = s["resumed_from"]
    lines = [
        f"train: {s['steps']} learner steps, policy v{s['version']}, {s['groups']} groups in {s['wall_s']:.0f} s "
        f"({s['steps_per_hour']:.0f} steps/h, learner idle {s['learner_idle_ratio']:.2f})"
        + (f"; resumed at step {resumed['step']} (v{resumed['version']}, {resumed['requeued']} groups re-queued)"
           if resumed else ""),
        f"  stage: GRPO (stage 3) {start}",
        f"  reward trend: first third of steps {fmt(trend['first_steps_reward'])} -> last third "
        f"{fmt(trend['last_steps_reward'])}; completions parsed {s['parsed']}, compiled {s['compiled']}, "
        f"correct {s['correct']} of {s['completions']}",
        "  best speedup per task this session: "
        + (", ".join(f"{t} {x:.2f}x" for t, x in best.items()) or "none correct yet"),
        f"  archive: {_archive_line(s['archive'])}",
        f"  report: {report}",
        f"  run directory: {s['run_dir']} (checkpoints/, adapters/, trajectories.jsonl, metrics.jsonl, "
        f"train_summary.json); continue with: rl-kernels train --resume {s['run_dir']} train.max_steps=N",
    ]
    return "\n".join(lines)


def _archive_line(rows: list[dict[str, Any]]) -> str:
    """Best archived kernel per task (the archive holds verified kernels only)."""
    def best(r: dict[str, Any]) -> str:
        x = r["best_speedup"]
        return f"{r['task_id']} {x:.2f}x (v{r['best_policy_version']})" if x is not None else f"{r['task_id']} -"
    return f"{sum(r['count'] for r in rows)} verified kernels; best " + (", ".join(map(best, rows)) or "-")


def cmd_selftrain(args: argparse.Namespace, cfg: Config) -> int:
    """Stage 2 on Ray (generators, compile pool, timers, buffer), the fine-tuning in this process."""
    from rl_kernels.cluster.driver import Driver, RunDirError
    from rl_kernels.cluster.selftrain import RoundsStage

    try:
        s = Driver(RoundsStage, cfg, resume=bool(args.resume_dir)).run()
    except RunDirError as exc:
        raise ConfigError(str(exc).replace("pass --resume", f"pass --resume {cfg.run_dir}")) from None
    kept = [r["selftrain/kept"] for r in s["rounds"]]
    correct = [f"{r['selftrain/correct']}/{r['selftrain/samples']}" for r in s["rounds"]]
    print(f"selftrain: {len(s['rounds'])} round(s), correct per round {', '.join(correct)}, kept {kept}, "
          f"policy v{s['version']} (adapters/policy-v{s['version']}; sample it with "
          f"`rl-kernels heldout {s['run_dir']}`); archive: {_archive_line(s['archive'])}")
    return 0


def cmd_sft(args: argparse.Namespace, cfg: Config) -> int:
    from rl_kernels.learner.warm_start import run_warm_start

    report = run_warm_start(cfg, lambda line: print(line, file=sys.stderr, flush=True))
    samples = report.get("samples") or {}
    kind = "adapter" if "adapter" in report else "model"
    print(f"warm start: {report['verified']} of {report['read']} kernels verified (refused {report['refused']}), "
          f"{report['train_examples']} trained on over {len(report['losses'])} steps, loss "
          f"{report['losses'][0]:.3f} -> {report['losses'][-1]:.3f}; held-out loss "
          f"{report['heldout_loss_before']} -> {report['heldout_loss_after']}; after training "
          f"{samples.get('compile_rate', 0):.0%} compiled, {samples.get('correct_rate', 0):.0%} correct; "
          f"{kind} {report[kind]}")
    return 0


def cmd_heldout(args: argparse.Namespace, cfg: Config) -> int:
    """The run's policy (its newest published version, or --version) on the held-out tasks."""
    run = Path(cfg.run_dir)
    # stdout carries the result: what libraries print while they load goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
        summary = _heldout(args, cfg, run)
    if args.json:
        print(json.dumps(summary))
    else:
        from rl_kernels.heldout import HELDOUT_FILE, summary_line

        print(f"{summary_line(summary)}; appended to {run / HELDOUT_FILE}")
    return 0


def _heldout(args: argparse.Namespace, cfg: Config, run: Path) -> dict[str, Any]:
    from rl_kernels.learner.publish import adapter_dir, published_versions
    from rl_kernels.heldout import append_report, evaluate_heldout
    from rl_kernels.tasks import load_suite
    from rl_kernels.tasks.split import task_split

    versions = published_versions(run)
    version = args.version if args.version is not None else (versions[-1] if versions else 0)
    if version and version not in versions:
        raise ConfigError(f"{run} has no published adapter v{version} (published: {versions or 'none'})")
    tasks = task_split(cfg.split).heldout(load_suite(cfg.suite))
    if not tasks:
        raise ConfigError(f"suite {cfg.suite!r} has no held-out tasks under this config's split.*")
    print(f"held-out: policy v{version} on {len(tasks)} task(s), {cfg.split.samples} sample(s) each", flush=True)
    summary = evaluate_heldout(cfg, tasks, version, adapter_dir(run, version) if version else None,
                               lambda line: print(line, flush=True))
    append_report(run, summary)
    return summary


def cmd_compare(args: argparse.Namespace, cfg: Config) -> int:
    """Policy versions of a run sampled on the same tasks, prompts, seeds and budget through the Ray
    pipeline (cluster/compare.py); the table, and the JSON with every figure and outcome, are written
    to RUN_DIR/compare/."""
    from rl_kernels.cluster.compare import make_plan, run_comparison
    from rl_kernels.cluster.status import Console
    from rl_kernels.comparison_report import markdown_table

    if args.samples is not None:
        cfg.compare.samples = args.samples
    plan = make_plan(cfg, versions=args.versions, tasks=args.tasks.split(",") if args.tasks else None,
                     heldout=args.heldout, name=args.name)
    # stdout carries the result: progress and what libraries print go to stderr under --json
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        print(plan.headline(), flush=True)
        summary = run_comparison(cfg, plan, Console())
    if args.json:
        print(json.dumps(summary))
    else:
        print(markdown_table(summary))
        print("written: " + ", ".join(summary["files"]))
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def cmd_report(args: argparse.Namespace) -> int:
    """Draw a run's curves from its files alone: no config is loaded, so any run directory works."""
    from rl_kernels.report import write_report

    try:
        report = write_report(Path(args.run_dir), Path(args.out) if args.out else None)
    except (FileNotFoundError, ValueError) as exc:   # not a run directory, or a corrupt record
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.html)
    print(report.summary_line())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-kernels", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("eval", help="compile, check and time one candidate kernel")
    p.add_argument("--task", required=True, help="task id (builtin/softmax, hgemm/fp32/4096_4096_4096) or task file")
    p.add_argument("--candidate", required=True, help="candidate file (.py module candidate or .cu/.cpp hgemm kernel)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _common(p)
    p = sub.add_parser("build", help="static gate and build of one candidate (the compile pool's job; no GPU)")
    p.add_argument("--task", required=True, help="task id (builtin/softmax, hgemm/fp32/4096_4096_4096) or task file")
    p.add_argument("--candidate", required=True, help="candidate file (.py module candidate or .cu/.cpp hgemm kernel)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _common(p)
    p = sub.add_parser("tasks", help="list task suites")
    p.add_argument("action", choices=["list"])
    p.add_argument("--suite", help="builtin, hgemm, hgemm/fp16, hgemm/fp32 or a KernelBench directory")
    p.add_argument("--limit", type=int, default=0)
    _common(p)
    p = sub.add_parser("bench", help="evaluate a directory of kernels, one per task, and summarise")
    p.add_argument("--suite", help="suite to match candidates against (default: config suite)")
    p.add_argument("--candidates", help="directory of candidate files named after the tasks")
    p.add_argument("--seeds", action="store_true", help="evaluate the suite's own seed solutions instead")
    p.add_argument("--limit", type=int, default=0, help="evaluate at most this many candidates")
    p.add_argument("--out", help="append one JSON line per measurement to this file")
    p.add_argument("--jobs", type=int, default=0, help="parallel builds before timing (default: all cores)")
    _common(p)
    p = sub.add_parser("export", help="the best verified hgemm kernels as a pip-installable package with a "
                                      "torch.library op and a dispatch plan measured on this device")
    p.add_argument("--from", dest="source", help="a run directory, its archive.sqlite, or a directory of "
                                                  "M_N_K.cu/.cpp kernels (each verified by the evaluator first)")
    p.add_argument("--out", help="directory to write the package project into")
    p.add_argument("--name", help="package name (default rlk_hgemm_<backend>)")
    p.add_argument("--device", help="device to check and time on (default cuda or cpu, by eval.backend)")
    p.add_argument("--shapes", help="extra M_N_K shapes to plan on zero-padded larger kernels, comma-separated")
    p.add_argument("--accumulator", choices=["fp32", "fp16"], default="fp32",
                   help="accumulator of a kernel directory's kernels (an archive names its own)")
    p.add_argument("--jobs", type=int, default=0, help="parallel builds (default: all cores)")
    p.add_argument("--verify", metavar="PACKAGE_DIR", help="measure an exported package's plan again here "
                                                          "(exit 1 when a decision no longer holds)")
    _common(p)
    p = sub.add_parser("rollout", help="generate, compile and time groups on Ray (no learning): search and "
                                       "pipeline benchmark")
    p.add_argument("--resume", action="store_true", help="continue the search in an existing run directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(p)
    p = sub.add_parser("train", help="train the policy with GRPO on Ray: generators, compile pool, timers, "
                                     "replay buffer and the LoRA/DeepSpeed learner")
    p.add_argument("--resume", dest="resume_dir", metavar="RUN_DIR",
                   help="continue RUN_DIR from its last checkpoint (its config.yaml is the base config)")
    _common(p)
    p = sub.add_parser("sft", help="supervised warm start: re-verify the configured kernels (sft.sources), train "
                                   "a LoRA adapter (or every weight: sft.full_finetune) on them, sample and "
                                   "evaluate the result")
    _common(p)
    p = sub.add_parser("selftrain", help="self-training rounds: sample the policy through the rollout pipeline, keep "
                                         "the verified kernels, fine-tune on them, publish the next version")
    p.add_argument("--resume", dest="resume_dir", metavar="RUN_DIR",
                   help="continue RUN_DIR after its last finished round (its config.yaml is the base config)")
    _common(p)
    p = sub.add_parser("heldout", help="sample a run's policy on the held-out tasks (never trained on) and report "
                                       "pass@k, compile / correct rates and the geomean speedup")
    p.add_argument("run", metavar="RUN_DIR", help="run directory (its config.yaml is the base config)")
    p.add_argument("--version", type=int, help="policy version to sample (default: the newest published; 0: base)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    _common(p)
    p = sub.add_parser("compare", help="sample policy versions of a run (default: 0, its start, and the newest) on the "
                                       "same tasks, prompts, seeds and budget; rates, fast_p and geomean speedups per "
                                       "task and pooled, with bootstrap intervals")
    p.add_argument("run", metavar="RUN_DIR", help="run directory (its config.yaml is the base config)")
    p.add_argument("--versions", help="comma-separated policy versions, e.g. 0,12 (default: 0 and the newest published)")
    p.add_argument("--samples", type=_positive_int, help="completions per task per version (default compare.samples)")
    p.add_argument("--tasks", help="comma-separated task ids among the run's training (or, with --heldout, held-out) tasks")
    p.add_argument("--heldout", action="store_true", help="the split's held-out tasks instead of the training tasks")
    p.add_argument("--name", help="file name under RUN_DIR/compare/ (default v0-vN, with -heldout)")
    p.add_argument("--json", action="store_true", help="print the whole comparison as one JSON object")
    _common(p)
    p = sub.add_parser("report", help="draw a run's curves and speedups to PNG files and one HTML page")
    p.add_argument("run_dir", help="run directory (holds trajectories.jsonl and/or metrics.jsonl)")
    p.add_argument("--out", help="output directory (default: RUN_DIR/report)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "report":   # takes no --config or overrides: there is nothing to resolve
        return cmd_report(args)
    try:
        cfg = _resolve(args)
        if args.dry_run:
            print(dump_config(cfg), end="")
            if args.command in _GRAPH_COMMANDS:
                print(_dry_run_plan(cfg, learner=_GRAPH_COMMANDS[args.command]).render())
            return 0
        if args.command in _GRAPH_COMMANDS and cfg.cluster.simulate is None:
            from rl_kernels.policy.preflight import check_policy

            check_policy(cfg)   # the model and the backend, before any actor starts
            if cfg.cluster.ray_address is None:
                _check_fits_this_machine(cfg, learner=_GRAPH_COMMANDS[args.command])
        handler = {"eval": cmd_eval, "build": cmd_build, "tasks": cmd_tasks, "bench": cmd_bench, "export": cmd_export,
                   "rollout": cmd_rollout,
                   "train": cmd_train, "sft": cmd_sft, "selftrain": cmd_selftrain,
                   "heldout": cmd_heldout, "compare": cmd_compare}[args.command]
        return handler(args, cfg)
    except (ConfigError, TaskError, PlacementError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
