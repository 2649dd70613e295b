"""`rl-kernels export`: verified hgemm kernels as a package a model can call.

Where the kernels come from: a run's archive (the best kernel per hgemm task, every one of which
passed every gate when the run measured it) or a directory of CUDA-L2-style kernel files named
`M_N_K.cu` / `.cpp`, each evaluated through the whole evaluator first (gate, build, sandbox,
correctness, timing) and left out unless it passed everything.

What export decides here, on the device it exports for: each kernel is built, loaded in this
process and checked against the fp32 reference again; then the op's own call (`KernelLibrary.hgemm`:
the transpose the ABI needs, the launch) is timed against `torch.matmul` on the same inputs,
interleaved, and the shape runs the kernel only where it measured `export.min_speedup` or better.
For each extra shape asked for (`--shapes`) the nearest larger covered kernel is tried on
zero-padded inputs the same way (pad + kernel + slice against torch.matmul on the unpadded shape).
Every decision keeps its two medians in the manifest; `verify` measures them again.

Each shipped cuda kernel is also tried inside a CUDA graph (capture.py, in a child process): the op
takes it under capture only where that worked.  The op's dispatch is built in C++ too (native/
rlk_dispatch.cpp, against this torch), and used wherever that torch version runs it.

The package: `OUT/pyproject.toml` and `OUT/NAME/` holding `manifest.json`, `kernels/*.so`,
`dispatch/NAME_cpp.so`, a copy of `runtime.py` and an `__init__.py` that registers `NAME::hgemm`;
`pip install OUT` needs no compiler.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import platform
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rl_kernels.config import Config, ConfigError
from rl_kernels.ops import runtime
from rl_kernels.ops.runtime import FORMAT, MANIFEST, KernelLibrary

Progress = Callable[[str], None]
_NAME_RE = re.compile(r"[a-z_][a-z0-9_]*")
_SHAPE_RE = re.compile(r"([1-9][0-9]*)_([1-9][0-9]*)_([1-9][0-9]*)")
KERNEL_SUFFIXES = (".cu", ".cpp", ".cc")


@dataclass
class Candidate:
    """One kernel to export: its task, its source, and where its earlier measurement came from."""

    task_id: str
    source: str
    provenance: dict[str, Any] = field(default_factory=dict)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """`--shapes 4000_4096_4096,77_128_64` -> [(4000, 4096, 4096), (77, 128, 64)]."""
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _SHAPE_RE.fullmatch(part)
        if match is None:
            raise ConfigError(f"--shapes: {part!r} is not M_N_K with positive integers (e.g. 4000_4096_4096)")
        shapes.append((int(match[1]), int(match[2]), int(match[3])))
    return shapes


def check_name(name: str) -> str:
    """The package name, or a ConfigError: it is a Python package and an op namespace."""
    if not _NAME_RE.fullmatch(name):
        raise ConfigError(f"--name {name!r}: a package name is lowercase letters, digits and _ (rlk_hgemm_cuda)")
    return name


def from_archive(path: Path, backend: str) -> list[Candidate]:
    """The best archived kernel of every hgemm task for `backend`, from a run dir or its archive.sqlite."""
    from rl_kernels.archive import KernelArchive

    file = path / "archive.sqlite" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"--from {path}: no archive.sqlite there (a run directory holds one)")
    archive = KernelArchive(file)
    found = []
    for task_id in archive.tasks():
        best = archive.best(task_id, backend) if task_id.startswith("hgemm/") else None
        if best is not None:
            found.append(Candidate(task_id, best.source, {
                "from": "archive", "speedup": best.speedup, "baseline": best.baseline, "mode": best.mode,
                "device": best.device, "candidate_ms": best.candidate_ms, "baseline_ms": best.baseline_ms,
                "policy_version": best.policy_version}))
    if not found:
        raise ConfigError(f"--from {file}: no verified hgemm kernel for backend {backend} in the archive")
    return found


def from_directory(directory: Path, accumulator: str, cfg: Config, progress: Progress, jobs: int = 1) -> list[Candidate]:
    """Every `M_N_K` kernel file of `directory` that passes the whole evaluator on this host; all are
    gated and built first in a pool of `jobs` processes (CUTLASS builds take tens of seconds each),
    then evaluated one at a time."""
    from rl_kernels.archive import passed_every_gate
    from rl_kernels.evaluation.build import build_many
    from rl_kernels.evaluation.evaluator import Evaluator
    from rl_kernels.tasks.hgemm import hgemm_task

    files = sorted(p for p in directory.rglob("*") if p.suffix in KERNEL_SUFFIXES and p.is_file())
    named = []
    for f in files:
        if _SHAPE_RE.fullmatch(f.stem) is None:
            progress(f"skip {f.name}: not named M_N_K")
        else:
            named.append((f, hgemm_task(f"hgemm/{accumulator}/{f.stem}"), f.read_text()))
    if not named:
        raise ConfigError(f"--from {directory}: no kernel file named M_N_K{'/'.join(KERNEL_SUFFIXES)} "
                          "(CUDA-L2's naming, e.g. 4096_4096_4096.cu)")
    done = iter(range(1, len(named) + 1))
    builds = build_many([(task, source) for _, task, source in named], cfg.eval, jobs,
                        on_done=lambda: progress(f"built {next(done)}/{len(named)}"))
    evaluator = Evaluator(cfg.eval)
    found = []
    try:
        for i, ((f, task, source), build) in enumerate(zip(named, builds), 1):
            m = evaluator.evaluate(task, source, build if build.key else None)
            if not passed_every_gate(m):
                progress(f"[{i}/{len(named)}] {f.name}: left out, {m.rejected or 'not correct'} "
                         f"{m.detail.splitlines()[0] if m.detail else ''}")
                continue
            progress(f"[{i}/{len(named)}] {f.name}: verified, {m.speedup:.3f}x {m.baseline}")
            found.append(Candidate(task.id, source, {
                "from": str(f), "speedup": m.speedup, "baseline": m.baseline, "mode": m.mode, "device": m.device,
                "candidate_ms": m.candidate_ms, "baseline_ms": m.baseline_ms, "baselines_ms": m.baselines_ms}))
    finally:
        evaluator.close()
    if not found:
        raise ConfigError(f"--from {directory}: no kernel passed the evaluator on {cfg.eval.backend}")
    return found


def export(candidates: list[Candidate], out: Path, name: str, cfg: Config, shapes: list[tuple[int, int, int]],
           device: torch.device, source: str, progress: Progress, jobs: int = 1) -> dict[str, Any]:
    """Builds the candidates (`jobs` at a time), checks and times them on `device` and writes the
    package; returns its manifest."""
    from rl_kernels.archive import source_sha256
    from rl_kernels.evaluation.build import build_many
    from rl_kernels.tasks.hgemm import hgemm_task, parse_hgemm_id

    check_name(name)
    backend = cfg.eval.backend
    if (device.type == "cuda") != (backend == "cuda"):
        raise ConfigError(f"--device {device} does not run {backend} kernels (eval.backend={backend})")
    best: dict[str, Candidate] = {}
    for cand in candidates:     # one kernel per task: the one measured fastest before
        held = best.get(cand.task_id)
        if held is None or cand.provenance.get("speedup", 0) > held.provenance.get("speedup", 0):
            best[cand.task_id] = cand
    package = out / name
    if package.exists():
        shutil.rmtree(package)
    (package / "kernels").mkdir(parents=True)
    builds = build_many([(hgemm_task(c.task_id), c.source) for c in best.values()], cfg.eval, jobs)
    kernels = []
    for i, (cand, build) in enumerate(zip(best.values(), builds), 1):
        spec = parse_hgemm_id(cand.task_id)
        if not build.ok or build.artifact is None:
            progress(f"[{i}/{len(best)}] {cand.task_id}: left out, the build failed ({build.reason})")
            continue
        kid = f"{spec.accumulator}_{spec.m}_{spec.n}_{spec.k}_{source_sha256(cand.source)[:12]}"
        file = package / "kernels" / f"{kid}.so"
        file.write_bytes(build.artifact)
        kernels.append({"id": kid, "task": cand.task_id, "m": spec.m, "n": spec.n, "k": spec.k,
                        "accumulator": spec.accumulator, "file": file.relative_to(package).as_posix(),
                        "sha256": runtime.file_sha256(file), "source_sha256": source_sha256(cand.source),
                        "build_path": build.path, "measured": cand.provenance})
        progress(f"[{i}/{len(best)}] {cand.task_id}: built ({build.seconds:.1f} s{', cached' if build.cached else ''})")
    manifest = _manifest_head(name, backend, device, cfg, source)
    manifest["kernels"] = kernels
    manifest["plan"] = _provisional_plan(kernels, shapes, cfg)
    _write_json(package / MANIFEST, manifest)
    library = KernelLibrary(package, allow_other_cpu=True)
    plan = []
    for entry in manifest["plan"]:
        decided = _decide(library, entry, device, cfg)
        progress(f"{entry['m']}x{entry['n']}x{entry['k']} {entry['accumulator']}: {decided['path']} "
                 f"({decided['reason']})")
        plan.append(decided)
    used = {p["kernel"] for p in plan if p["path"] != "matmul"}
    for k in kernels:
        if k["id"] not in used:
            (package / k["file"]).unlink()
    manifest["plan"] = plan
    manifest["kernels"] = [k for k in kernels if k["id"] in used]
    if cfg.export.cpp_dispatch:
        manifest["dispatch"] = _dispatch(package, name, backend, cfg, progress)
    for k in manifest["kernels"]:
        k.update(_capture_verdict(package / k["file"], k, backend, cfg))
        progress(f"{k['id']}: {'capturable' if k['capturable'] else 'not capturable'} ({k['capture']})")
    _write_json(package / MANIFEST, manifest)
    _write_package(out, name, manifest)
    return manifest


DISPATCH_SOURCE = Path(__file__).with_name("native") / "rlk_dispatch.cpp"


def _dispatch(package: Path, name: str, backend: str, cfg: Config, progress: Progress) -> dict[str, Any] | None:
    """The op's C++ dispatch, built against this torch into the package (cached by content), or None
    with the reason said when it does not build (the Python dispatch then serves every call)."""
    from rl_kernels.evaluation.build import build_torch_library

    namespace = f"{name}_cpp"
    defines = [f"-DRLK_NS={namespace}", *(["-DRLK_WITH_CUDA"] if backend == "cuda" else [])]
    build = build_torch_library(namespace, {"rlk_dispatch.cpp": DISPATCH_SOURCE.read_text()}, backend, cfg.eval.build,
                                defines)
    if not build.ok or build.artifact is None:
        progress(f"C++ dispatch: not built ({build.reason}), the Python dispatch serves every call:\n{build.log[-2000:]}")
        return None
    file = package / "dispatch" / f"{namespace}.so"
    file.parent.mkdir(exist_ok=True)
    file.write_bytes(build.artifact)
    progress(f"C++ dispatch: built ({build.seconds:.1f} s{', cached' if build.cached else ''}), op {namespace}::hgemm")
    return {"file": file.relative_to(package).as_posix(), "sha256": runtime.file_sha256(file), "namespace": namespace,
            "torch": torch.__version__}


def _capture_verdict(so: Path, kernel: dict[str, Any], backend: str, cfg: Config) -> dict[str, Any]:
    """Whether the op may take this kernel while a CUDA graph is captured (capture.py's probe, in a
    child process); cpu kernels have no graphs."""
    if backend != "cuda":
        return {"capturable": None, "capture": "cpu kernel: no CUDA graphs"}
    from rl_kernels.ops.capture import probe_in_child

    found = probe_in_child(so, kernel["m"], kernel["n"], kernel["k"], cfg.export.capture_timeout_s)
    return {"capturable": bool(found["capturable"]), "capture": str(found["detail"])}


def verify(package: Path, cfg: Config, device: torch.device) -> list[dict[str, Any]]:
    """Every kernel path of the plan checked and timed again here: the old and new medians, and whether
    the decision still holds (a matmul decision ships no kernel, so there is nothing to re-measure)."""
    library = KernelLibrary(package)
    rows = []
    for entry in library.manifest["plan"]:
        if entry["path"] == "matmul":
            rows.append({**entry, "now": "matmul", "holds": True})
            continue
        again = _decide(library, entry, device, cfg)
        kernel = library.kernels[entry["kernel"]]
        capture = _capture_verdict(library.root / kernel["file"], kernel, library.backend, cfg)
        rows.append({**entry, "op_ms_now": again.get("op_ms"), "matmul_ms_now": again.get("matmul_ms"),
                     "speedup_now": again.get("speedup"), "now": again["path"],
                     "capturable": kernel.get("capturable"), "capturable_now": capture["capturable"],
                     "holds": again["path"] == entry["path"] and capture["capturable"] == kernel.get("capturable")})
    return rows


def _manifest_head(name: str, backend: str, device: torch.device, cfg: Config, source: str) -> dict[str, Any]:
    build = cfg.eval.build
    head: dict[str, Any] = {
        "format": FORMAT, "name": name, "backend": backend, "machine": platform.machine(),
        "torch": torch.__version__, "python": platform.python_version(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "settings": cfg.export.model_dump(),
    }
    if backend == "cuda":
        head.update(device=torch.cuda.get_device_name(device), arch=runtime.cuda_arch(device),
                    build_flags=[*build.nvcc_flags, *[f"-arch={a}" for a in build.cuda_archs]])
    else:
        head.update(device=runtime.cpu_model(), build_flags=[*build.cxx_flags, *build.cpu_arch_flags])
    return head


def _provisional_plan(kernels: list[dict[str, Any]], shapes: list[tuple[int, int, int]],
                      cfg: Config) -> list[dict[str, Any]]:
    """Every covered shape on its own kernel, every extra shape on the smallest larger kernel of the
    same accumulator within `max_pad_ratio` (or matmul when there is none); `_decide` then measures."""
    plan = [{"m": k["m"], "n": k["n"], "k": k["k"], "accumulator": k["accumulator"], "path": "exact",
             "kernel": k["id"], "pad_to": None} for k in kernels]
    covered = {(k["m"], k["n"], k["k"], k["accumulator"]) for k in kernels}
    accumulators = sorted({k["accumulator"] for k in kernels})
    for m, n, kk in shapes:
        for acc in accumulators:
            if (m, n, kk, acc) in covered:
                continue
            bigger = [k for k in kernels if k["accumulator"] == acc and k["m"] >= m and k["n"] >= n and k["k"] >= kk
                      and k["m"] * k["n"] * k["k"] <= cfg.export.max_pad_ratio * m * n * kk]
            entry: dict[str, Any] = {"m": m, "n": n, "k": kk, "accumulator": acc}
            if not bigger:
                plan.append({**entry, "path": "matmul", "kernel": None, "pad_to": None,
                             "reason": f"no kernel covers it within {cfg.export.max_pad_ratio}x its volume"})
                continue
            best = min(bigger, key=lambda k: (k["m"] * k["n"] * k["k"], k["id"]))
            plan.append({**entry, "path": "pad", "kernel": best["id"], "pad_to": [best["m"], best["n"], best["k"]]})
    return plan


def _decide(library: KernelLibrary, entry: dict[str, Any], device: torch.device, cfg: Config) -> dict[str, Any]:
    """Checks the kernel path of `entry` on random inputs and times it against torch.matmul, through
    the library's own dispatch (the plan holds `entry` meanwhile; whatever it held before is put back)."""
    from rl_kernels.evaluation.problems import hgemm_relnorm

    if entry["path"] == "matmul":
        return entry
    m, n, k, acc = entry["m"], entry["n"], entry["k"], entry["accumulator"]
    gen = torch.Generator(device=device).manual_seed(cfg.export.seed + m * 31 + n * 17 + k)
    limit = hgemm_relnorm(cfg.eval.correctness, acc, k)
    with _planned(library, entry):
        for _ in range(cfg.export.check_sets):
            a = torch.randn((m, k), generator=gen, device=device).half()
            b = torch.randn((k, n), generator=gen, device=device).half()
            err = runtime.relative_gap(library.hgemm(a, b, accumulator=acc), a.float() @ b.float())
            if not math.isfinite(err) or err > limit:
                return {**entry, "path": "matmul", "kernel": None, "pad_to": None, "op_ms": None, "matmul_ms": None,
                        "speedup": None, "reason": f"wrong here: relative-norm error {err:.3g} > {limit:.3g}"}
        op_ms, matmul_ms = time_pair(lambda: library.hgemm(a, b, accumulator=acc), lambda: torch.matmul(a, b),
                                     device, cfg.export.warmup, cfg.export.reps)
    speedup = matmul_ms / op_ms
    what = f"padded to {'x'.join(map(str, entry['pad_to']))}, " if entry.get("pad_to") else ""
    # Six significant digits each (fixed decimals cost a 0.02x speedup or a microsecond kernel its precision,
    # and the manifest's speedup would then disagree with its own times).
    measured = {"op_ms": _sig(op_ms), "matmul_ms": _sig(matmul_ms), "speedup": _sig(speedup)}
    if speedup >= cfg.export.min_speedup:
        return {**entry, **measured,
                "reason": f"{what}{speedup:.3f}x torch.matmul at export ({op_ms:.4f} vs {matmul_ms:.4f} ms)"}
    return {**entry, **measured, "path": "matmul",
            "reason": f"{what}the kernel measured {speedup:.3f}x torch.matmul at export, below min_speedup "
                      f"{cfg.export.min_speedup}"}


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


@contextlib.contextmanager
def _planned(library: KernelLibrary, entry: dict[str, Any]) -> Iterator[None]:
    """`entry`'s shape dispatched by `entry` while the block runs, then as before (or not at all)."""
    key = (entry["m"], entry["n"], entry["k"], entry["accumulator"])
    before = library.plan.get(key)
    library.plan[key] = {"reason": "being measured", **entry}
    try:
        yield
    finally:
        if before is None:
            del library.plan[key]
        else:
            library.plan[key] = before


def time_pair(f: Callable[[], Any], g: Callable[[], Any], device: torch.device, warmup: int,
              reps: int) -> tuple[float, float]:
    """Median milliseconds of f and of g, their calls interleaved so drift (clocks, other load) hits
    both; CUDA events on a GPU, the wall clock on a CPU."""
    for _ in range(warmup):
        f()
        g()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(2 * reps)]
        for i in range(reps):
            for j, fn in enumerate((f, g)):
                start, end = events[2 * i + j]
                start.record()
                fn()
                end.record()
        torch.cuda.synchronize(device)
        times = [start.elapsed_time(end) for start, end in events]
        return statistics.median(times[0::2]), statistics.median(times[1::2])
    fs, gs = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        t1 = time.perf_counter()
        g()
        t2 = time.perf_counter()
        fs.append((t1 - t0) * 1e3)
        gs.append((t2 - t1) * 1e3)
    return statistics.median(fs), statistics.median(gs)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")


def _write_package(out: Path, name: str, manifest: dict[str, Any]) -> None:
    package = out / name
    shutil.copyfile(Path(runtime.__file__), package / "_runtime.py")
    (package / "__init__.py").write_text(_INIT.format(name=name, device=manifest["device"],
                                                      backend=manifest["backend"], created=manifest["created"]))
    version = manifest["created"][:10].replace("-", ".")
    (out / "pyproject.toml").write_text(_PYPROJECT.format(name=name, version=version, device=manifest["device"]))
    rows = ["| M | N | K | acc | path | kernel | op ms | torch.matmul ms | speedup |", "|---|---|---|---|---|---|---|---|---|"]
    for p in manifest["plan"]:
        rows.append(f"| {p['m']} | {p['n']} | {p['k']} | {p['accumulator']} | {p['path']} | {p.get('kernel') or '-'} | "
                    f"{p.get('op_ms') or '-'} | {p.get('matmul_ms') or '-'} | {p.get('speedup') or '-'} |")
    (out / "README.md").write_text(_README.format(name=name, device=manifest["device"], created=manifest["created"],
                                                  table="\n".join(rows)))


_INIT = '''"""{name}: hgemm kernels exported by rl-kernels on {created} for {device} ({backend}).

    import {name}
    c = {name}.hgemm(a, b)            # a: [M, K], b: [K, N] float16 -> [M, N]
    with {name}.patch_linear(model):  # fp16 nn.Linear layers through the op
        y = model(x)
    {name}.explain()                  # per shape: the path, its export-time measurements, calls

`op()` is the op itself: `{name}_cpp::hgemm`, the dispatch in C++, under the torch version it was
exported with (where it loads), else the Python dispatch `{name}::hgemm` (`library().native_reason`
says why).  The library is checked against this host on first use (LibraryError when it cannot run here).
"""

from pathlib import Path

from ._runtime import KernelLibrary, LibraryError, patch_linear as _patch_linear, register_op

_state = {{}}


def library() -> KernelLibrary:
    if "library" not in _state:
        _state["library"] = KernelLibrary(Path(__file__).parent)
    return _state["library"]


_python_op = register_op("{name}::hgemm", library)


def op():
    return library().native_op() or _python_op


def hgemm(a, b, b_col_major=None, accumulator="fp32"):
    return op()(a, b, b_col_major, accumulator)


def explain():
    return library().explain()


def patch_linear(model):
    return _patch_linear(model, library(), op())


__all__ = ["KernelLibrary", "LibraryError", "explain", "hgemm", "library", "op", "patch_linear"]
'''

_PYPROJECT = '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "hgemm kernels exported by rl-kernels for {device}"
requires-python = ">=3.10"
dependencies = ["torch"]

[tool.setuptools]
packages = ["{name}"]

[tool.setuptools.package-data]
{name} = ["manifest.json", "kernels/*.so", "dispatch/*.so"]
'''

_README = '''# {name}

hgemm kernels exported by `rl-kernels export` on {created} for {device}. `pip install .` needs no
compiler; `import {name}; {name}.hgemm(a, b)`. The plan (measured at export; `rl-kernels export
--verify` measures it again):

{table}
'''


def progress_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
