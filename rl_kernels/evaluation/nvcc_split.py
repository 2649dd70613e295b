"""One nvcc compile as separate build steps, so its host front end and its device chain run at the same time.

nvcc runs its phases one after another: the host preprocessing and cudafe++ (the host front end), then
per architecture the device preprocessing, cicc and ptxas, then fatbinary, then the host compile.  On a
module candidate against the slim torch headers the two front ends take 5-6 s each and the host compile
another 5 (docs/EVALUATOR.md, run 20), and a build is one translation unit, so the other cores idle.
The device chain needs one thing from the host chain: the module id cudafe++ writes.  Written here first
(from the source and the command), cudafe++ reads it instead of generating it, both chains run side by
side, and the host compile joins them.

The steps are nvcc's own (`nvcc --dryrun --keep`): same tools, flags, include paths and temporary
files, so the object is the one nvcc would make.  Where the dry run shows a step this module does not
know (a link step, a tool it has not seen), `split_compile` returns None and the caller keeps nvcc as one
step.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rl_kernels.evaluation import ninja

_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_DEVICE_TOOLS = ("cicc", "ptxas", "fatbinary")
_OUTPUT_OPTIONS = ("-o", "--gen_c_file_name", "--stub_file_name")
_OUTPUT_PREFIXES = ("--embedded-fatbin=", "--create=")
_LOG_PARTS = re.compile(r"(?m)^(?=FAILED: |\[\d+/\d+\] |ninja: build stopped)")


@dataclass(frozen=True)
class _Step:
    kind: str             # host_pp, cudafe, device_pp, cicc, ptxas, fatbinary, host_cc
    argv: list[str]
    outputs: list[str]


def split_compile(nvcc_argv: list[str], source: str, cwd: Path, keep_dir: str) -> list[ninja.Edge] | None:
    """Build edges equivalent to `nvcc_argv` (an `nvcc ... -c SOURCE -o OBJ` command run in `cwd`), with
    nvcc's intermediate files under `keep_dir` (relative to `cwd`); None when the dry run is not the
    plain single-object compile this module knows, or fails (the caller then runs nvcc itself)."""
    (cwd / keep_dir).mkdir(parents=True, exist_ok=True)
    try:
        res = subprocess.run([*nvcc_argv, "--dryrun", "--keep", "--keep-dir", keep_dir], cwd=cwd,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    steps = _steps(res.stderr)
    if steps is None:
        return None
    cudafe = next(s for s in steps if s.kind == "cudafe")
    module_id_path = _option_value(cudafe.argv, "--module_id_file_name")
    if "--gen_module_id_file" not in cudafe.argv or module_id_path is None:
        return None
    digest = hashlib.sha256("\0".join([*nvcc_argv, (cwd / source).read_text(errors="replace")]).encode())
    stem = re.sub(r"\W", "_", Path(source).stem)
    (cwd / module_id_path).write_text(f"_rlk_{digest.hexdigest()[:16]}_{stem}")
    steps[steps.index(cudafe)] = _Step("cudafe", [a for a in cudafe.argv if a != "--gen_module_id_file"],
                                       cudafe.outputs)
    edges: list[ninja.Edge] = []
    made: list[str] = []
    for step in steps:
        if step.kind == "host_cc":
            inputs = list(made)
        else:
            inputs = [out for out in made if any(out in arg for arg in step.argv)]
        if step.kind == "host_pp" or step.kind == "device_pp":
            inputs.append(source)
        edges.append(ninja.Edge(step.outputs, inputs, step.argv, f"{step.kind} {source}"))
        made += step.outputs
    return edges


def without_repeated_errors(log: str) -> str:
    """ninja's log with a failed step's messages replaced by a note where an earlier failed step printed
    the same ones: cudafe++ and cicc parse the same source side by side and report the same errors, which
    the build log (and the policy that reads it) needs once."""
    seen: set[str] = set()
    parts = []
    for part in _LOG_PARTS.split(log):
        if part.startswith("FAILED: "):
            head, _, rest = part.partition("\n")
            command, _, messages = rest.partition("\n")
            if messages.strip() and messages in seen:
                part = f"{head}\n{command}\n(the same messages as the failed step above)\n"
            seen.add(messages)
        parts.append(part)
    return "".join(parts)


def _steps(dryrun: str) -> list[_Step] | None:
    """nvcc's dry run (`#$ ` lines: variable assignments, then commands) as classified steps."""
    env = dict(os.environ)
    steps: list[_Step] = []
    for raw in dryrun.splitlines():
        if not raw.startswith("#$ "):
            continue
        line = raw[3:].strip()
        assignment = _ASSIGNMENT.match(line)
        if assignment is not None:
            env[assignment.group(1)] = _substitute(assignment.group(2), env).strip().strip('"')
            continue
        argv = shlex.split(_substitute(line, env))
        if not argv or Path(argv[0]).name == "rm":
            continue
        step = _classify(argv, env.get("PATH", ""))
        if step is None:
            return None
        steps.append(step)
    kinds = [s.kind for s in steps]
    if kinds.count("cudafe") != 1 or kinds.count("host_pp") != 1 or kinds[-1:] != ["host_cc"] \
            or kinds.count("host_cc") != 1 or "cicc" not in kinds:
        return None
    return steps


def _classify(argv: list[str], path: str) -> _Step | None:
    tool = Path(argv[0]).name
    resolved = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=path)
    if resolved is None:
        return None
    argv = [resolved, *argv[1:]]
    outputs = _outputs(argv)
    if tool == "cudafe++":
        kind = "cudafe"
        outputs = [o for o in outputs if "/" in o or o == _option_value(argv, "--gen_c_file_name")]
    elif tool in _DEVICE_TOOLS:
        kind = tool
    elif "-E" in argv:
        kind = "device_pp" if any(a.startswith("-D__CUDA_ARCH__=") for a in argv) else "host_pp"
    elif "-c" in argv:
        kind = "host_cc"
    else:
        return None
    if not outputs:
        return None
    return _Step(kind, argv, outputs)


def _outputs(argv: list[str]) -> list[str]:
    found = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in _OUTPUT_OPTIONS]
    found += [a.split("=", 1)[1] for a in argv if a.startswith(_OUTPUT_PREFIXES)]
    return found


def _option_value(argv: list[str], option: str) -> str | None:
    for i, a in enumerate(argv[:-1]):
        if a == option:
            return argv[i + 1]
    return None


def _substitute(text: str, env: dict[str, str]) -> str:
    return _VARIABLE.sub(lambda m: env.get(m.group(1), ""), text)
