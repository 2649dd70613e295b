"""nvcc's compile as parallel build steps: the same object, chains that do not wait for each other, nvcc's
errors, and nvcc kept whole where the dry run is not a plain compile."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rl_kernels.evaluation import ninja, nvcc_split

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

SOURCE = """
#include <cuda_runtime.h>
__global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
void launch_scale(float* x, float a, int n, cudaStream_t s) { scale<<<(n + 255) / 256, 256, 0, s>>>(x, a, n); }
"""
ARCHS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
         "-gencode", "arch=compute_90,code=compute_90"]


def _symbols(obj: Path) -> list[str]:
    out = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines())


def _compile(tmp_path: Path, source: str) -> tuple[list[ninja.Edge], ninja.ProcResult]:
    (tmp_path / "k.cu").write_text(source)
    argv = ["nvcc", *ARCHS, "-Xcompiler", "-fPIC", "-c", "k.cu", "-o", "k.cu.o"]
    edges = nvcc_split.split_compile(argv, "k.cu", tmp_path, "k.nvcc")
    assert edges is not None
    return edges, ninja.run_ninja(tmp_path, edges, 300)


def test_the_steps_make_the_object_nvcc_makes_with_the_two_chains_apart(tmp_path: Path) -> None:
    edges, res = _compile(tmp_path, SOURCE)
    assert res.returncode == 0, res.output
    subprocess.run(["nvcc", *ARCHS, "-Xcompiler", "-fPIC", "-c", "k.cu", "-o", "whole.o"], cwd=tmp_path, check=True)
    assert _symbols(tmp_path / "k.cu.o") == _symbols(tmp_path / "whole.o")
    by_kind = {}
    for edge in edges:
        by_kind.setdefault(edge.description.split()[0], []).append(edge)
    assert len(by_kind["cicc"]) == 2 and len(by_kind["ptxas"]) == 2
    device_outputs = {o for kind in ("device_pp", "cicc", "ptxas", "fatbinary") for e in by_kind[kind] for o in e.outputs}
    host_front = [*by_kind["host_pp"], *by_kind["cudafe"]]
    assert not any(i in device_outputs for e in host_front for i in e.inputs)      # cudafe++ waits for no device step
    assert not any(i.endswith((".cpp4.ii", ".cudafe1.cpp")) for kind in ("cicc", "ptxas") for e in by_kind[kind]
                   for i in e.inputs)                                              # nor the device chain for it
    (joined,) = by_kind["host_cc"]
    assert set(joined.inputs) >= {o for e in edges if e is not joined for o in e.outputs}
    module_id = (tmp_path / "k.nvcc" / "k.module_id").read_text()
    assert module_id.startswith("_rlk_") and module_id.endswith("_k")


def test_a_compile_error_fails_with_the_compilers_message(tmp_path: Path) -> None:
    _, res = _compile(tmp_path, SOURCE + "\n__global__ void broken(float* x) { x[0] = undeclared_name; }\n")
    assert res.returncode != 0
    assert "undeclared_name" in res.output and "error" in res.output
    assert nvcc_split.without_repeated_errors(res.output).count("is undefined") == 1


def test_the_second_front_ends_repeat_of_an_error_is_dropped_from_the_log() -> None:
    error = 'k.cu(1): error: identifier "x" is undefined\n\n1 error detected in the compilation of "k.cu".\n'
    log = ("ninja: Entering directory `/w'\n[3/7] cicc k.cu\nFAILED: [code=1] k.ptx\ncicc --c++17 k.cpp1.ii\n" + error
           + "[4/7] cudafe k.cu\nFAILED: [code=2] k.cudafe1.cpp\ncudafe++ --c++17 k.cpp4.ii\n" + error
           + "ninja: build stopped: subcommand failed.\n")
    kept = nvcc_split.without_repeated_errors(log)
    assert kept.count("is undefined") == 1
    assert "cudafe++ --c++17 k.cpp4.ii\n(the same messages as the failed step above)\n" in kept
    assert kept.endswith("ninja: build stopped: subcommand failed.\n")
    other = log.replace(error, 'k.cu(2): error: expected a ";"\n', 1)       # different messages: both kept
    assert nvcc_split.without_repeated_errors(other) == other


def test_what_is_not_a_plain_compile_stays_one_nvcc(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(SOURCE)
    link = ["nvcc", *ARCHS, "-shared", "k.cu", "-o", "k.so"]                       # compile and link: nvlink, ld
    assert nvcc_split.split_compile(link, "k.cu", tmp_path, "k.nvcc") is None
    bad_flag = ["nvcc", "--no-such-flag", "-c", "k.cu", "-o", "k.o"]              # nvcc's own dry run fails
    assert nvcc_split.split_compile(bad_flag, "k.cu", tmp_path, "k.nvcc") is None
