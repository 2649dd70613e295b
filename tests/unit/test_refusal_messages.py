"""Every static-gate refusal tells the user what to do: the line and construct, why, and the change
or the setting that accepts it.  Candidates are hand-written in the style of released KernelBench
solutions (a ModelNew with a load_inline kernel, torch ops beside it, try/except fallbacks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rl_kernels.evaluation.guards import static_check
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.evaluation.refusals import REASON_TEXT
from rl_kernels.tasks.hgemm import hgemm_task
from rl_kernels.tasks.module import load_module_task, parse_module_task

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
MODULE_TASK = parse_module_task((CANDIDATES / "honest" / "tasks" / "relu.py").read_text(), "test/relu", "relu.py")
HGEMM_TASK = hgemm_task("hgemm/fp32/1024_1024_1024")
SETTING = "eval.allow_torch_rewrites=true"
NONE = "no setting accepts"
LINE_SHAPE = re.compile(r"^line \d+( of \S+)?[^:]*: `.+` — .+; .+$")

# Line numbers below are this template's: line 1 is PRELUDE, the kernel call is on line 27.
_TEMPLATE = '''PRELUDE
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);NATIVE
  int64_t n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu"]KWARGS)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x)
'''


def _candidate(prelude: str = "", forward: str = "", native: str = "", kwargs: str = "") -> str:
    """The template with a construct put in: `forward` replaces the body's kernel call (line 27)."""
    source = _TEMPLATE.replace("PRELUDE", prelude).replace("NATIVE", native).replace("KWARGS", kwargs)
    return source.replace("        return ext.relu(x)\n", forward) if forward else source


def _refuse(source: str, allow: bool = False) -> tuple[Reason, list[str]]:
    verdict = static_check(MODULE_TASK, source, "cuda", allow_torch_ops=allow)
    assert verdict.reason is not None, "the gate passed it"
    lines = verdict.detail.splitlines()
    for line in lines:
        assert LINE_SHAPE.match(line) or line.startswith("... and "), line
    return verdict.reason, lines


def test_the_template_passes() -> None:
    assert static_check(MODULE_TASK, _candidate(), "cuda").ok


def test_import_os_names_the_line_and_no_setting() -> None:
    reason, lines = _refuse(_candidate(prelude="import os"))
    assert reason is Reason.FORBIDDEN_IMPORT
    assert lines[0].startswith("line 1: `import os` — ")
    assert "os.environ" in lines[0] and NONE in lines[0]


def test_torch_op_beside_the_kernel_names_the_setting() -> None:
    forward = "        y = torch.matmul(x, x)\n        return ext.relu(y)\n"
    reason, lines = _refuse(_candidate(forward=forward))
    assert reason is Reason.NO_CUSTOM_KERNEL
    assert lines[0].startswith("line 27: `torch.matmul` — torch compute in forward()")
    assert "move the computation into your kernel" in lines[0] and SETTING in lines[0]
    assert static_check(MODULE_TASK, _candidate(forward=forward), "cuda", allow_torch_ops=True).ok


def test_try_except_torch_fallback_is_named_as_a_fallback() -> None:
    forward = ("        try:\n            return ext.relu(x)\n        except RuntimeError:\n"
               "            return torch.relu(x)\n")
    reason, lines = _refuse(_candidate(forward=forward))
    assert reason is Reason.NO_CUSTOM_KERNEL
    assert lines[0].startswith("line 30: `torch.relu` — ")
    assert "try/except" in lines[0] and "fallback" in lines[0]
    assert "remove the try/except" in lines[0] and SETTING in lines[0]


@pytest.mark.parametrize("forward,construct", [
    ("        return ext.relu(x).sum()\n", "`.sum()` — the tensor compute method in forward()"),
    ("        return ext.relu(x @ x)\n", "`x @ x` — the matmul operator in forward()"),
    ("        return self.fc(ext.relu(x))\n", "`self.fc(...)` — a torch layer or function held by the module"),
])
def test_torch_compute_forms_name_the_construct_and_setting(forward: str, construct: str) -> None:
    source = _candidate(forward=forward).replace("super().__init__()",
                                                 "super().__init__()\n        self.fc = nn.Linear(4, 4)")
    reason, lines = _refuse(source)
    assert reason is Reason.NO_CUSTOM_KERNEL
    assert construct in lines[0] and SETTING in lines[0]


def test_no_kernel_names_both_ways_out() -> None:
    pure = ("import torch\nimport torch.nn as nn\n"
            "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")
    reason, lines = _refuse(pure)
    assert reason is Reason.NO_CUSTOM_KERNEL
    assert lines[0].startswith("line 1: `no load_inline call` — no kernel of your own")
    assert "write a __global__ kernel" in lines[0] and SETTING in lines[0]
    assert "must still build one load_inline extension" in lines[0]


@pytest.mark.parametrize("source,start,action", [
    ("def (:\n", "line 1: `invalid syntax`", "fix the syntax"),
    ("import torch\nclass Model: pass\n", "line 1: `class ModelNew`", "define `class ModelNew(nn.Module)`"),
])
def test_malformed_files_say_what_is_missing(source: str, start: str, action: str) -> None:
    reason, lines = _refuse(source)
    assert reason is Reason.MALFORMED and lines[0].startswith(start) and action in lines[0] and NONE in lines[0]


def test_hgemm_without_entry_point_shows_the_signature() -> None:
    verdict = static_check(HGEMM_TASK, "__global__ void k() {}\n", "cuda")
    assert verdict.reason is Reason.MALFORMED
    assert verdict.detail.startswith("line 1: `entry point` — ") and "b_col_major" in verdict.detail
    assert NONE in verdict.detail


@pytest.mark.parametrize("change,reason,start,action", [
    ({"forward": "        return eval('ext.relu(x)')\n"}, Reason.DYNAMIC_CODE, "line 27: `eval`", "literally"),
    ({"forward": "        data = open('w.bin').read()\n        return ext.relu(x)\n"}, Reason.FILE_ACCESS,
     "line 27: `open`", "embed the data"),
    ({"forward": "        with torch.cuda.stream(torch.cuda.Stream()):\n            return ext.relu(x)\n"},
     Reason.SIDE_STREAM, "line 27: `torch.cuda.stream`", "current stream"),
    ({"forward": "        setattr(torch, 'relu', ext.relu)\n        return ext.relu(x)\n"}, Reason.MONKEYPATCH,
     "line 27: `setattr(torch, 'relu')`", "your own objects"),
    ({"forward": "        torch.manual_seed(0)\n        return ext.relu(x)\n"}, Reason.MONKEYPATCH,
     "line 27: `torch.manual_seed`", "remove the call"),
    ({"forward": "        return ext.relu(x.__class__(x))\n"}, Reason.DYNAMIC_CODE, "line 27: `x.__class__`",
     "public attribute"),
    ({"kwargs": ", build_directory='/tmp/x'"}, Reason.FILE_ACCESS, "line 19: `build_directory=`",
     "remove build_directory"),
    ({"kwargs": ", extra_cuda_cflags=['-Xlinker=--wrap=cudaEventRecord']"}, Reason.FORBIDDEN_FLAG, "line 19: `",
     "drop the flag"),
    ({"kwargs": ", extra_ldflags=['-lcublas']"}, Reason.NO_CUSTOM_KERNEL, "line 19: `-lcublas`",
     "drop the library"),
])
def test_python_refusals_name_line_construct_and_remedy(change: dict[str, str], reason: Reason, start: str,
                                                        action: str) -> None:
    got, lines = _refuse(_candidate(**change))
    assert got is reason and lines[0].startswith(start), lines[0]
    assert action in lines[0] and NONE in lines[0]


def test_non_literal_sources_say_which_forms_are_read() -> None:
    source = _candidate().replace("cuda_sources=cuda_source", "cuda_sources=cuda_source.upper()")
    reason, lines = _refuse(source)
    assert reason is Reason.DYNAMIC_CODE and lines[0].startswith("line 19: `cuda_sources=cuda_source.upper()`")
    assert "string literals" in lines[0] and NONE in lines[0]


@pytest.mark.parametrize("native,reason,token,action", [
    ("\n  std::thread t([]{}); t.join();", Reason.THREAD_SPAWN, "`std::thread`", "parallelise inside your kernel"),
    ("\n  static int calls = 0; ++calls;", Reason.STALE_OUTPUT, "`static int calls`", "const/constexpr"),
    ("\n  cudaStream_t s; cudaStreamCreate(&s);", Reason.SIDE_STREAM, "`cudaStreamCreate`", "current stream"),
    ("\n  auto z = torch::matmul(x, x);", Reason.NO_CUSTOM_KERNEL, "`torch::matmul`", SETTING),
])
def test_native_refusals_point_into_the_extension_source(native: str, reason: Reason, token: str,
                                                         action: str) -> None:
    got, lines = _refuse(_candidate(native=native))
    assert got is reason
    assert lines[0].startswith(f"line 9 of cuda_sources[0] (python line 21): {token} — "), lines[0]  # one line added
    assert action in lines[0]


def test_several_findings_are_several_lines_worst_first() -> None:
    forward = "        y = torch.matmul(x, x)\n        return ext.relu(y)\n"
    reason, lines = _refuse(_candidate(prelude="import subprocess", forward=forward))
    assert reason is Reason.PROCESS_SPAWN
    assert lines[0].startswith("line 1: `import subprocess`") and lines[1].startswith("line 27: `torch.matmul`")


def test_every_static_refusal_of_the_hack_corpus_names_a_remedy() -> None:
    """Closes the class: whatever construct the gate refuses, each line says what to change and
    either that no setting accepts it or which one does."""
    hacks = CANDIDATES / "hacks"
    for entry in yaml.safe_load((hacks / "manifest.yaml").read_text())["hacks"]:
        task = hgemm_task(entry["task"]) if "task" in entry else load_module_task(hacks / entry["task_file"])
        verdict = static_check(task, (hacks / entry["file"]).read_text(), entry["backend"])
        for line in verdict.detail.splitlines() if verdict.reason is not None else []:
            assert LINE_SHAPE.match(line) or line.startswith("... and "), (entry["file"], line)
            assert NONE in line or SETTING in line or line.startswith("... and "), (entry["file"], line)


@pytest.mark.parametrize("found,remedy", [
    ((Reason.NO_CUSTOM_KERNEL, "ext.o: links libcublas.so.12: a library does the work"), SETTING),
    ((Reason.PROCESS_SPAWN, "ext.o: imports fork"), NONE),
])
def test_refusal_after_linking_names_the_remedy(monkeypatch: pytest.MonkeyPatch, found: tuple[Reason, str],
                                               remedy: str) -> None:
    from rl_kernels.evaluation import build

    monkeypatch.setattr(build, "check_artifact", lambda *args, **kwargs: found)
    outcome = build._with_evidence(build._Outcome(True, "ninja: done"), [], [], False, "cpu")
    assert outcome.reason == found[0].value
    assert outcome.log.endswith(f"refused after linking: {found[1]} — {REASON_TEXT[found[0]][1]}")
    assert remedy in outcome.log
