"""`rl-kernels export` on the cpu backend: real builds, real evaluations, the package used from a fresh
interpreter that cannot import rl_kernels, pip-installed, and refused where it cannot run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rl_kernels.archive import KernelArchive, source_sha256
from rl_kernels.cli import main
from rl_kernels.config import Config, load_config
from rl_kernels.ops import runtime
from rl_kernels.ops.export import Candidate, export, from_archive, from_directory, verify
from rl_kernels.ops.runtime import KernelLibrary, LibraryError
from rl_kernels.types import Measurement

REPO = Path(__file__).resolve().parents[2]
SEEDS = REPO / "rl_kernels" / "tasks" / "builtin" / "hgemm"
COVERED = ("64_64_64", "128_64_32")
SHAPES = [(100, 64, 30), (50, 60, 40)]   # the first pads to 128x64x32; the second fits nothing within 2x


def _config(cache_dir: Path, *overrides: str) -> Config:
    return load_config(REPO / "configs" / "local.yaml",
                       [f"eval.build.cache_dir={cache_dir}", "eval.backend=cpu", "eval.sandbox.prestart=off",
                        "export.reps=5", "export.warmup=1", *overrides])


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two honest kernels, one that accumulates in fp16 (wrong for an fp32 task), one file not named M_N_K."""
    d = tmp_path_factory.mktemp("kernels")
    for shape in COVERED:
        shutil.copyfile(SEEDS / "seed_cpu_fp32.cpp", d / f"{shape}.cpp")
    shutil.copyfile(SEEDS / "seed_cpu_fp16.cpp", d / "64_64_4096.cpp")
    (d / "notes.cpp").write_text("// not a kernel of any shape\n")
    return d


@pytest.fixture(scope="module")
def verified(kernel_dir: Path, cache_dir: Path) -> list[Candidate]:
    """The kernel directory through the whole evaluator: the two honest kernels pass, the rest not."""
    lines: list[str] = []
    candidates = from_directory(kernel_dir, "fp32", _config(cache_dir), lines.append, jobs=2)
    assert sorted(c.task_id for c in candidates) == ["hgemm/fp32/128_64_32", "hgemm/fp32/64_64_64"], lines
    assert any("64_64_4096.cpp: left out, incorrect" in line for line in lines), lines
    assert any("notes.cpp: not named M_N_K" in line for line in lines), lines
    assert "built 3/3" in lines, lines     # built in the pool first, then evaluated
    return candidates


@pytest.fixture(scope="module")
def exported(verified: list[Candidate], cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    cfg = _config(cache_dir, "export.min_speedup=0")
    out = tmp_path_factory.mktemp("export")
    manifest = export(verified, out, "rlk_test_cpu", cfg, SHAPES, torch.device("cpu"), "kernel dir", lambda line: None)
    return out, manifest


def test_the_plan_holds_exact_padded_and_matmul_shapes_each_with_its_measurements(exported: tuple[Path, dict]) -> None:
    out, manifest = exported
    plan = {(p["m"], p["n"], p["k"]): p for p in manifest["plan"]}
    assert {key: p["path"] for key, p in plan.items()} == {
        (64, 64, 64): "exact", (128, 64, 32): "exact", (100, 64, 30): "pad", (50, 60, 40): "matmul"}
    assert plan[(100, 64, 30)]["pad_to"] == [128, 64, 32]
    assert "within 2.0x its volume" in plan[(50, 60, 40)]["reason"]
    for key in ((64, 64, 64), (128, 64, 32), (100, 64, 30)):
        p = plan[key]
        assert p["op_ms"] > 0 and p["matmul_ms"] > 0 and p["speedup"] == pytest.approx(p["matmul_ms"] / p["op_ms"], rel=1e-3)
    package = out / "rlk_test_cpu"
    for k in manifest["kernels"]:
        assert runtime.file_sha256(package / k["file"]) == k["sha256"] and k["measured"]["speedup"] > 0
    assert manifest["backend"] == "cpu" and manifest["device"] == runtime.cpu_model()
    assert {"created", "torch", "build_flags", "settings", "source"} <= set(manifest)
    assert (out / "pyproject.toml").is_file() and "| 100 | 64 | 30 | fp32 | pad |" in (out / "README.md").read_text()


def test_min_speedup_decides_from_the_measurements_and_ships_no_unused_kernel(
        verified: list[Candidate], cache_dir: Path, tmp_path: Path) -> None:
    cfg = _config(cache_dir, "export.min_speedup=1000000")
    manifest = export(verified, tmp_path, "rlk_slow", cfg, SHAPES, torch.device("cpu"), "dir", lambda line: None)
    assert {p["path"] for p in manifest["plan"]} == {"matmul"}
    measured = [p for p in manifest["plan"] if p.get("op_ms")]
    assert len(measured) == 3 and all("below min_speedup 1000000" in p["reason"] for p in measured)
    assert manifest["kernels"] == [] and list((tmp_path / "rlk_slow" / "kernels").iterdir()) == []


def test_the_package_works_in_a_fresh_interpreter_that_cannot_import_rl_kernels(exported: tuple[Path, dict]) -> None:
    out, _ = exported
    script = textwrap.dedent("""
        import sys
        sys.modules["rl_kernels"] = None            # the package must not need it
        import torch, rlk_test_cpu as K
        assert K.op() is torch.ops.rlk_test_cpu_cpp.hgemm.default or "rlk_test_cpu_cpp" in str(K.op()), K.op()
        a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
        ref = a.float() @ b.float()
        assert (K.hgemm(a, b).float() - ref).abs().max() < 0.05
        a2, b2 = torch.randn(100, 30).half(), torch.randn(30, 64).half()
        assert (K.hgemm(a2, b2).float() - a2.float() @ b2.float()).abs().max() < 0.05
        f = torch.compile(lambda x, y: K.hgemm(x, y) * 2.0, fullgraph=True)
        assert (f(a, b).float() - 2 * ref).abs().max() < 0.1
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)).half()
        x = torch.randn(2, 32, 64).half()
        with torch.no_grad():
            stock = model(x)
            with K.patch_linear(model) as patched:
                fast = model(x)
        assert patched == 2 and (fast.float() - stock.float()).abs().max() < 0.05
        try:
            K.hgemm(torch.randn(3, 4).half(), torch.randn(5, 6).half())
            raise SystemExit("a shape mismatch must raise")
        except RuntimeError as exc:
            assert "cannot be multiplied" in str(exc)
        rows = {(r["m"], r["n"], r["k"], r["path"]): r for r in K.explain()}
        assert rows[(64, 64, 64, "exact")]["calls"] >= 2 and rows[(100, 64, 30, "pad")]["calls"] == 1
        assert "not measured at export" in rows[(64, 32, 64, "matmul")]["reason"]
        assert "float16" in K.library().choose(a.float(), b.float()).reason
        assert "non-contiguous" in K.library().choose(a.t(), b).reason
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", script], cwd=out, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(out)})
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


def test_pip_installs_the_package_without_building_anything(exported: tuple[Path, dict], tmp_path: Path) -> None:
    out, manifest = exported
    target = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "--target", str(target), str(out)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CC": "false", "CXX": "false"})
    assert res.returncode == 0, res.stderr[-2000:]
    installed = target / "rlk_test_cpu"
    assert {k["file"] for k in manifest["kernels"]} == {p.relative_to(installed).as_posix()
                                                       for p in (installed / "kernels").iterdir()}
    assert KernelLibrary(installed).plan.keys() == KernelLibrary(out / "rlk_test_cpu").plan.keys()


def test_a_corrupted_missing_or_foreign_library_is_refused_at_load(exported: tuple[Path, dict], tmp_path: Path) -> None:
    out, manifest = exported
    copy = tmp_path / "lib"
    shutil.copytree(out / "rlk_test_cpu", copy)
    first = copy / manifest["kernels"][0]["file"]
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(LibraryError, match=f"{first.name} is corrupted"):
        KernelLibrary(copy)
    first.unlink()
    with pytest.raises(LibraryError, match="is missing"):
        KernelLibrary(copy)
    shutil.copyfile(out / "rlk_test_cpu" / manifest["kernels"][0]["file"], first)
    edited = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**edited, "machine": "riscv64"}))
    with pytest.raises(LibraryError, match="built for riscv64"):
        KernelLibrary(copy)
    (copy / "manifest.json").write_text(json.dumps({**edited, "device": "another CPU", "build_flags": ["-march=native"]}))
    with pytest.raises(LibraryError, match="-march=native on 'another CPU'"):
        KernelLibrary(copy)
    assert KernelLibrary(copy, allow_other_cpu=True).backend == "cpu"
    (copy / "manifest.json").write_text("{")
    with pytest.raises(LibraryError, match="not valid JSON"):
        KernelLibrary(copy)
    with pytest.raises(LibraryError, match="no manifest"):
        KernelLibrary(tmp_path)


def test_under_cuda_graph_capture_only_kernels_that_export_captured_take_their_path(
        exported: tuple[Path, dict]) -> None:
    """A cpu library has no graphs: every kernel says so, and a call made while capturing would run
    torch.matmul with that reason; a kernel the probe captured keeps its path."""
    out, manifest = exported
    assert all(k["capturable"] is None and k["capture"] == "cpu kernel: no CUDA graphs" for k in manifest["kernels"])
    lib = KernelLibrary(out / "rlk_test_cpu")
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    assert lib.choose(a, b).path == "exact"
    under = lib.choose(a, b, capturing=True)
    assert under.path == "matmul" and under.reason.startswith("CUDA graph capture: kernel fp32_64_64_64_")
    assert under.reason.endswith("is not capturable (cpu kernel: no CUDA graphs)")
    lib.kernels[lib.plan[(64, 64, 64, "fp32")]["kernel"]]["capturable"] = True
    assert lib.choose(a, b, capturing=True).path == "exact"


def test_a_library_of_the_previous_format_is_refused_with_what_to_do(exported: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = exported
    copy = tmp_path / "lib"
    shutil.copytree(out / "rlk_test_cpu", copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "format": 1}))
    with pytest.raises(LibraryError, match="format 1, this runtime reads format 2 .*export the library again"):
        KernelLibrary(copy)


def test_the_cpp_dispatch_takes_the_python_dispatchs_decisions_and_results(exported: tuple[Path, dict]) -> None:
    """The op's C++ dispatch (built at export against this torch) against the Python one: the same
    path, the same product and the same fallback reason for every kind of call; explain() counts both."""
    out, manifest = exported
    assert manifest["dispatch"]["namespace"] == "rlk_test_cpu_cpp" and manifest["dispatch"]["torch"] == torch.__version__
    lib = KernelLibrary(out / "rlk_test_cpu")
    native = lib.native_op()
    assert native is not None, lib.native_reason
    torch.manual_seed(0)
    calls = [(torch.randn(m, k).half(), torch.randn(k, n).half()) for m, n, k in
             ((64, 64, 64), (128, 64, 32), (100, 64, 30), (50, 60, 40), (8, 8, 8))]
    calls += [(torch.randn(64, 64), torch.randn(64, 64)),                       # float32
              (torch.randn(64, 64).half().t(), torch.randn(64, 64).half()),      # a transposed view
              (torch.randn(2, 64, 64).half(), torch.randn(64, 64).half())]       # 3-d
    for a, b in calls:
        assert torch.equal(native(a, b, None, "fp32"), lib.hgemm(a, b))
    rows = lib.explain()
    planned = {(r["m"], r["n"], r["k"]): r["calls"] for r in rows if "op_ms" in r or r.get("reason", "").startswith("no kernel")}
    assert planned[(64, 64, 64)] == 2 and planned[(128, 64, 32)] == 2 and planned[(100, 64, 30)] == 2
    fallbacks = {(r["m"], r["n"], r["k"], r["reason"]): r["calls"] for r in rows if "op_ms" not in r}
    for reason in ("8x8x8 (fp32) was not measured at export", "non-contiguous operand (a transposed view, a slice)"):
        assert any(key[3] == reason and count == 2 for key, count in fallbacks.items()), fallbacks
    assert any(key[3].endswith(": the kernels take float16") and count == 2 for key, count in fallbacks.items())
    assert any(key[3] == "3-d @ 2-d: the kernels take 2-d operands" and count == 2 for key, count in fallbacks.items())
    with pytest.raises(RuntimeError):
        native(torch.randn(4, 5).half(), torch.randn(4, 5).half(), None, "fp32")   # torch.matmul's own error
    meta = native(torch.empty(100, 30, device="meta", dtype=torch.half), torch.empty(30, 64, device="meta",
                                                                                    dtype=torch.half), None, "fp32")
    assert meta.shape == (100, 64) and meta.device.type == "meta"


def test_a_second_library_of_the_same_name_keeps_the_python_dispatch(exported: tuple[Path, dict],
                                                                     tmp_path: Path) -> None:
    """A namespace registers once per process: the same package exported elsewhere is refused with the
    reason, never loaded (torch would abort), and its calls still run through Python."""
    out, _ = exported
    assert KernelLibrary(out / "rlk_test_cpu").native_op() is not None
    copy = tmp_path / "rlk_test_cpu"
    shutil.copytree(out / "rlk_test_cpu", copy)
    other = KernelLibrary(copy)
    assert other.native_op() is None and "already loaded in this process from" in other.native_reason
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    assert other.choose(a, b).path == "exact" and other.hgemm(a, b).shape == (64, 64)
    stale = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**stale, "dispatch": {**stale["dispatch"], "torch": "1.0"}}))
    stale_lib = KernelLibrary(copy)
    assert stale_lib.native_op() is None
    assert stale_lib.native_reason == f"the C++ dispatch was built for torch 1.0, this is torch {torch.__version__}"


def test_verify_measures_every_kernel_decision_again(exported: tuple[Path, dict], cache_dir: Path) -> None:
    out, _ = exported
    rows = verify(out / "rlk_test_cpu", _config(cache_dir, "export.min_speedup=0"), torch.device("cpu"))
    kernel_rows = [r for r in rows if r["path"] != "matmul"]
    assert len(kernel_rows) == 3 and all(r["holds"] and r["speedup_now"] > 0 for r in kernel_rows)
    strict = verify(out / "rlk_test_cpu", _config(cache_dir, "export.min_speedup=1000000"), torch.device("cpu"))
    assert [r["holds"] for r in strict if r["path"] != "matmul"] == [False, False, False]


def test_export_from_an_archive_takes_the_fastest_kernel_of_each_hgemm_task(cache_dir: Path, tmp_path: Path) -> None:
    seed = (SEEDS / "seed_cpu_fp32.cpp").read_text()
    slower = seed + "\n// the same kernel, measured slower\n"
    with KernelArchive(tmp_path / "archive.sqlite") as archive:
        for source, speedup in ((seed, 0.4), (slower, 0.3)):
            m = Measurement(task="hgemm/fp32/64_64_64", backend="cpu", mode="kernel", compiled=True, correct=True,
                            speedup=speedup, candidate_ms=1.0, baseline="torch_matmul", baseline_ms=speedup, reward=0.1)
            assert archive.add("hgemm/fp32/64_64_64", source, m, policy_version=3, backend="cpu")
    candidates = from_archive(tmp_path, "cpu")
    assert [(c.task_id, source_sha256(c.source), c.provenance["speedup"]) for c in candidates] == [
        ("hgemm/fp32/64_64_64", source_sha256(seed), 0.4)]
    assert main(["export", "--from", str(tmp_path), "--out", str(tmp_path / "pkg"), "--backend", "cpu",
                 f"eval.build.cache_dir={cache_dir}", "export.min_speedup=0", "export.reps=5"]) == 0
    kernels = json.loads((tmp_path / "pkg" / "rlk_hgemm_cpu" / "manifest.json").read_text())["kernels"]
    assert [(k["task"], k["measured"]["policy_version"]) for k in kernels] == [("hgemm/fp32/64_64_64", 3)]


@pytest.mark.parametrize("argv, message", [
    (["export", "--out", "x"], "export needs --from"),
    (["export", "--from", "/no/such/dir", "--out", "x"], "no such file or directory"),
    (["export", "--from", str(REPO / "docs"), "--out", "x", "--shapes", "64_64"], "is not M_N_K"),
    (["export", "--from", str(REPO / "docs"), "--out", "x", "--name", "Bad-Name"], "a package name is lowercase"),
    (["export", "--from", str(REPO / "docs"), "--out", "x"], "no kernel file named M_N_K"),
    (["export", "--verify", "/no/such/package"], "no manifest"),
])
def test_bad_export_input_is_one_clear_error(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main([*argv, "--backend", "cpu"]) == 2
    assert message in capsys.readouterr().err
