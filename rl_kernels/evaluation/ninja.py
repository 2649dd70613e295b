"""Running compilers: a ninja file per build, executed in its own process group under a wall timeout.

Why a process group: ninja forks compilers (nvcc forks cicc/ptxas/gcc); killing only ninja on a
timeout would leave them burning the compile node's cores.  Killing the group ends them all.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Edge:
    """One ninja build statement: `outputs` made from `inputs` by running `command`."""

    outputs: list[str]
    inputs: list[str]
    command: list[str]
    description: str = ""


@dataclass(frozen=True)
class Confined:
    """How a step's command runs: `argv(cmd)` wraps it (e.g. in namespaces), `env` is its whole environment."""

    argv: Callable[[list[str]], list[str]]
    env: dict[str, str]


@dataclass(frozen=True)
class ProcResult:
    returncode: int
    output: str
    timed_out: bool
    stdout: str = ""


def run_in_process_group(
    cmd: list[str],
    timeout_s: float,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin_text: str | None = None,
    separate_stdout: bool = False,
    confined: Confined | None = None,
) -> ProcResult:
    """Runs `cmd` in a new session; on timeout SIGKILLs the whole group (compilers included).

    With `confined`, the command is wrapped by it and gets only its environment.

    With separate_stdout the child's stdout is returned apart from its stderr (used for the JSON of
    the capture step); otherwise both are merged into `output` in order, like a terminal shows them.
    """
    if confined is not None:
        cmd, env = confined.argv(cmd), confined.env
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if separate_stdout else subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin_text, timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    if separate_stdout:
        return ProcResult(proc.returncode, err or "", timed_out, out or "")
    return ProcResult(proc.returncode, out or "", timed_out)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group already ended between the timeout and the kill
        pass


def ninja_executable() -> str:
    """The ninja binary of the running interpreter's environment first (Ray workers may not have
    the venv's bin on PATH), then whatever PATH offers."""
    candidate = Path(sys.executable).parent / "ninja"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("ninja")
    if found is None:
        raise RuntimeError("ninja is not installed (pip install ninja)")
    return found


def write_ninja_file(path: Path, edges: list[Edge]) -> None:
    """One generic rule; each edge carries its full command, so the file documents the build."""
    lines = ["ninja_required_version = 1.3", "", "rule run", "  command = $cmd", "  description = $desc", ""]
    for edge in edges:
        outs = " ".join(_escape_path(o) for o in edge.outputs)
        ins = " ".join(_escape_path(i) for i in edge.inputs)
        lines.append(f"build {outs}: run {ins}")
        lines.append(f"  cmd = {_escape_value(shlex.join(edge.command))}")
        lines.append(f"  desc = {_escape_value(edge.description or edge.outputs[0])}")
        lines.append("")
    path.write_text("\n".join(lines))


def run_ninja(build_dir: Path, edges: list[Edge], timeout_s: float, targets: list[str] | None = None,
              confined: Confined | None = None) -> ProcResult:
    """Writes build.ninja in build_dir and runs it there (all paths in edges are relative to it)."""
    write_ninja_file(build_dir / "build.ninja", edges)
    jobs = str(max(1, len(os.sched_getaffinity(0))))
    cmd = [ninja_executable(), "-C", str(build_dir), "-j", jobs, *(targets or [])]
    return run_in_process_group(cmd, timeout_s, cwd=build_dir, confined=confined)


def _escape_path(p: str) -> str:
    return p.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _escape_value(v: str) -> str:
    return v.replace("$", "$$").replace("\n", " ")
