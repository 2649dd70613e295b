"""Wall time per phase and peak memory per process of a whole `rl-kernels train` job (`make run`).

    python benchmarks/make_run_profile.py --out DIR [--config configs/local.yaml] [--interval 0.5] [overrides]

Runs the real job, `rl-kernels train --config CONFIG run_dir=DIR/run [overrides]`, and samples
/proc every `--interval` seconds for every process of its tree (the driver, the stage-1 child,
Ray's own processes, the actors' workers and what they start: builds, sandboxed evaluations).
Each process gets a role: the one its command line names (a Ray worker's title says its actor
class: `ray::LearnerActor...` is the learner), else its nearest ancestor's; the spawned stage-1
process and its children are `stage1`. Per role: the peak resident set of its largest process and
the peak of its processes' summed RSS at one sample; for the whole job, the peak of summed RSS and
of summed PSS (shared pages split between their processes: forked sandbox workers share most of
theirs, so RSS overstates a tree). Phases come from the job's own lines, timestamped as they
arrive: setup (to the first line of stage 1, or of stage 3 without it), stage 1 (`warm start:
no ...` to its summary line `stage 1 (warm start)`, split into verification, training with each
step's seconds, and sampling), stage 3 (to the summary line `train: N learner steps`) with each
learner step's wall and learner seconds as the driver's step line says them. Prints a table;
writes DIR/profile.json (with every sample's per-role totals; rewritten every minute while the job
runs, so a job stopped by hand leaves its profile so far) and DIR/job.log (the job's output, each
line with its second).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PAGE_GB = os.sysconf("SC_PAGE_SIZE") / 1e9
ACTOR_ROLES = {"LearnerActor": "learner", "GeneratorActor": "generator", "CompilerActor": "compile",
               "TimerActor": "timer", "ReplayBufferActor": "buffer"}
RAY_SYSTEM = ("gcs_server", "raylet", "dashboard", "log_monitor", "monitor.py", "runtime_env", "ray/_private")
# The driver's line per learner step (cluster/train.py), e.g. "step    2 v2 | ... | 268 s/step wall, learner 118.2 s".
STEP_LINE = re.compile(r"^step\s+\d+ v\d+ .*\|\s*(?P<wall>\d+) s/step wall, learner (?P<learner>[\d.]+) s")


@dataclass
class Proc:
    pid: int
    ppid: int
    cmd: str
    rss_gb: float


@dataclass
class RoleStats:
    peak_process_gb: float = 0.0    # the largest single process's RSS
    peak_sum_gb: float = 0.0        # the role's processes' RSS summed at one sample
    processes: set[int] = field(default_factory=set)


def read_procs() -> dict[int, Proc]:
    """Every process this user can see: parent, command line (a Ray worker's title), resident set."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry.name)] = Proc(int(entry.name), int(fields[1]), cmd.strip(), int(fields[21]) * PAGE_GB)
    return out


def pss_gb(pid: int) -> float:
    """Proportional set size (shared pages divided among the processes mapping them); 0 once gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return 0.0


def own_role(p: Proc, root: int) -> str | None:
    """The role a process's own command line names, if any."""
    if p.pid == root:
        return "driver"
    if p.cmd.startswith("ray::"):
        title = p.cmd.split()[0][5:]
        return next((role for name, role in ACTOR_ROLES.items() if title.startswith(name)), "ray_worker")
    if "multiprocessing.spawn" in p.cmd and p.ppid == root:
        return "stage1"
    if any(s in p.cmd for s in RAY_SYSTEM):
        return "ray_system"
    return None


def roles(procs: dict[int, Proc], root: int) -> dict[int, str]:
    """pid -> role for the tree under `root` (a process without its own role takes its ancestor's)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: dict[int, str] = {}
    stack = [(root, "driver")]
    while stack:
        pid, inherited = stack.pop()
        role = own_role(procs[pid], root) or inherited
        out[pid] = role
        stack += [(c, role) for c in children.get(pid, [])]
    return out


class Sampler(threading.Thread):
    """Samples the job's process tree every `interval` seconds until stopped."""

    def __init__(self, root: int, interval: float, t0: float) -> None:
        super().__init__(daemon=True)
        self.root, self.interval, self.t0 = root, interval, t0
        self.stop = threading.Event()
        self.stats: dict[str, RoleStats] = {}
        self.peak_total_rss = self.peak_total_pss = 0.0
        self.timeline: list[dict[str, Any]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            procs = read_procs()
            if self.root not in procs:
                return
            by_role: dict[str, float] = {}
            total_pss = 0.0
            for pid, role in roles(procs, self.root).items():
                rss = procs[pid].rss_gb
                s = self.stats.setdefault(role, RoleStats())
                s.processes.add(pid)
                s.peak_process_gb = max(s.peak_process_gb, rss)
                by_role[role] = by_role.get(role, 0.0) + rss
                total_pss += pss_gb(pid)
            for role, total in by_role.items():
                self.stats[role].peak_sum_gb = max(self.stats[role].peak_sum_gb, total)
            self.peak_total_rss = max(self.peak_total_rss, sum(by_role.values()))
            self.peak_total_pss = max(self.peak_total_pss, total_pss)
            self.timeline.append({"t": round(time.monotonic() - self.t0, 1), "pss_gb": round(total_pss, 3),
                                  **{r: round(v, 3) for r, v in by_role.items()}})
            self.stop.wait(self.interval)


def phases(lines: list[tuple[float, str]], end: float) -> dict[str, Any]:
    """Phase boundaries from the job's lines (seconds from the start; None where the job said nothing)."""
    def first(pattern: str) -> float | None:
        return next((t for t, line in lines if re.search(pattern, line)), None)

    def last(pattern: str) -> float | None:
        return next((t for t, line in reversed(lines) if re.search(pattern, line)), None)

    def span(a: float | None, b: float | None) -> float | None:
        return round(b - a, 1) if a is not None and b is not None else None

    stage1_start, reused = first(r"^warm start: no "), first(r"^warm start: reusing ")
    verified, trained = last(r"^verified \d+/\d+ "), last(r"^sft epoch \d+/\d+ done")
    stage1_end = first(r"^stage 1 \(warm start\)") if stage1_start is not None else None
    # A job stopped inside stage 1 has no stage 3; one without stage 1 starts it at once or on reuse.
    stage3_start = stage1_end if stage1_start is not None else (reused or 0.0)
    summary = first(r"^train: \d+ learner steps")
    sft_steps = [t for t, line in lines if re.match(r"^sft step \d+/\d+ ", line)]
    steps = [(t, m) for t, line in lines if (m := STEP_LINE.match(line))]
    return {
        "setup_s": round(stage1_start if stage1_start is not None else stage3_start, 1),
        "stage1_reused": reused is not None,
        "stage1_ran": stage1_start is not None,
        "stage1_s": span(stage1_start, stage1_end),
        "stage1_verify_s": span(stage1_start, verified),
        "stage1_train_s": span(verified, trained),
        "stage1_sample_s": span(trained, stage1_end),
        "stage3_s": span(stage3_start, summary if summary is not None else end),
        "stage1_steps_s": [round(b - a, 1) for a, b in zip([verified or 0.0, *sft_steps], sft_steps)],
        "stage3_first_step_s": span(stage3_start, steps[0][0]) if steps else None,
        "learner_steps": len(steps),
        "step_wall_s": [int(m["wall"]) for _, m in steps],
        "step_learner_s": [float(m["learner"]) for _, m in steps],
        "total_s": round(end, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for run/, job.log and profile.json")
    ap.add_argument("--config", default=str(REPO / "configs" / "local.yaml"))
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between /proc samples")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides, as rl-kernels train takes them")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("rl-kernels")
    cmd = [str(exe), "train", "--config", args.config, f"run_dir={args.out / 'run'}", *args.overrides]
    t0 = time.monotonic()
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                           start_new_session=True)
    sampler = Sampler(job.pid, args.interval, t0)
    sampler.start()
    lines: list[tuple[float, str]] = []
    written = 0.0
    try:
        with (args.out / "job.log").open("w") as log:
            assert job.stdout is not None
            for line in job.stdout:
                t = time.monotonic() - t0
                lines.append((t, line.rstrip("\n")))
                log.write(f"[{t:8.1f}] {line}")
                log.flush()
                sys.stdout.write(line)
                if t - written > 60:   # a job stopped by hand still leaves its profile so far
                    (args.out / "profile.json").write_text(json.dumps(profile(cmd, None, lines, t, sampler)) + "\n")
                    written = t
        rc = job.wait()
    except KeyboardInterrupt:
        os.killpg(job.pid, signal.SIGTERM)
        rc = job.wait()
    sampler.stop.set()
    sampler.join()
    result = profile(cmd, rc, lines, time.monotonic() - t0, sampler)
    (args.out / "profile.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return rc


def profile(cmd: list[str], rc: int | None, lines: list[tuple[float, str]], end: float, sampler: Sampler
            ) -> dict[str, Any]:
    """What profile.json holds: the phases, the peaks per role and of the whole job, the timeline;
    `rc` None while the job still runs (the partial profile written every minute)."""
    return {"command": cmd, "rc": rc, "phases": phases(lines, end),
            "peak_total_rss_gb": round(sampler.peak_total_rss, 3), "peak_total_pss_gb": round(sampler.peak_total_pss, 3),
            "roles": {r: {"peak_process_rss_gb": round(s.peak_process_gb, 3), "peak_sum_rss_gb": round(s.peak_sum_gb, 3),
                          "processes": len(s.processes)} for r, s in sorted(sampler.stats.items())},
            "timeline": sampler.timeline}


def table(result: dict[str, Any]) -> str:
    ph = result["phases"]
    stage1 = ("reused" if ph["stage1_reused"] else "none" if not ph["stage1_ran"] else
              f"{ph['stage1_s'] if ph['stage1_s'] is not None else 'not finished'} s (verify {ph['stage1_verify_s']}, "
              f"train {ph['stage1_train_s']}, sample {ph['stage1_sample_s']}; steps {ph['stage1_steps_s']} s)")
    rows = [f"job exit {result['rc']}, {ph['total_s']:.0f} s: setup {ph['setup_s']} s, stage 1 {stage1}, stage 3 "
            f"{ph['stage3_s']} s (to the first step {ph['stage3_first_step_s']} s; {ph['learner_steps']} learner "
            f"steps, wall {ph['step_wall_s']} s, learner {ph['step_learner_s']} s)",
            f"peak of the whole job: {result['peak_total_pss_gb']:.2f} GB PSS, {result['peak_total_rss_gb']:.2f} GB summed RSS",
            "| role | processes | peak RSS of one process (GB) | peak summed RSS (GB) |", "|---|---|---|---|"]
    rows += [f"| {r} | {s['processes']} | {s['peak_process_rss_gb']:.2f} | {s['peak_sum_rss_gb']:.2f} |"
             for r, s in result["roles"].items()]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
