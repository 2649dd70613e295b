"""Module capture: running a candidate's top level records its load_inline calls, nothing else."""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from rl_kernels.config import BuildConfig
from rl_kernels.evaluation.artifact import generate_inline_sources
from rl_kernels.evaluation import build
from rl_kernels.evaluation.build import _capture, build_candidate
from rl_kernels.evaluation.forkserver import ForkServer
from rl_kernels.types import Task

SRC = Path(__file__).resolve().parents[1] / "candidates" / "build"
MODULE_TASK = Task(id="add", kind="module")


def _cfg(tmp_path: Path, **kw) -> BuildConfig:
    return BuildConfig(cache_dir=tmp_path / "cache", **kw)


def test_capture_records_load_inline_arguments(tmp_path: Path) -> None:
    cap = _capture((SRC / "module_cpu.py").read_text(), _cfg(tmp_path))
    assert cap.calls is not None, cap.error
    (call,) = cap.calls
    assert call["name"] == "rlk_test_add"
    assert call["functions"] == {"add_fwd": "add_fwd"}
    assert call["extra_cflags"] == ["-O3"] and call["cuda_sources"] == []
    assert "add_fwd" in call["cpp_sources"][0]


def test_capture_hides_gpus_and_does_not_instantiate_the_model(tmp_path: Path) -> None:
    source = (
        "import os, torch\n"
        "from torch.utils.cpp_extension import load_inline\n"
        "assert os.environ['CUDA_VISIBLE_DEVICES'] == ''\n"
        "ext = load_inline('e', cpp_sources='int f() { return 1; }', functions='f')\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        raise SystemExit('must not be instantiated')\n"
    )
    cap = _capture(source, _cfg(tmp_path))
    assert cap.calls is not None, cap.error
    assert cap.calls[0]["functions"] == {"f": "f"}


_BUILT_IN_CONSTRUCTOR = (
    "import torch\n"
    "from torch.utils.cpp_extension import load_inline\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def __init__(self, n):\n"
    "        super().__init__()\n"
    "        self.w = torch.nn.Parameter(torch.ones(n))\n"
    "        if torch.cuda.is_available():\n"
    "            self.ext = load_inline('e', cpp_sources='int f() { return 1; }', functions='f')\n"
    "            self.w.data = self.w.data.cuda()\n"
    "    def forward(self, x):\n"
    "        return self.ext.f()\n"
    "def get_init_inputs():\n"
    "    return [3]\n"
)


def test_capture_records_the_calls_the_constructor_makes_where_a_gpu_is(tmp_path: Path) -> None:
    """No call at top level: ModelNew is constructed from the candidate's get_init_inputs(), as on
    the device (CUDA-L1's released kernels build their extension there); what the constructor
    recorded counts even though it then failed on the GPU-less build host."""
    cap = _capture(_BUILT_IN_CONSTRUCTOR, _cfg(tmp_path))
    assert cap.calls is not None, cap.error
    assert [c["name"] for c in cap.calls] == ["e"]


def test_a_capture_is_kept_per_source_and_a_failed_one_is_not(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The same source is captured once per cache dir: the second build of it starts no process.
    A capture that failed is run again (a timeout may be the host's, not the source's)."""
    source = (SRC / "module_cpu.py").read_text()
    runs: list[str] = []
    real = build._run_capture
    monkeypatch.setattr(build, "_run_capture", lambda src, cfg: runs.append(src) or real(src, cfg))
    first = _capture(source, _cfg(tmp_path))
    again = _capture(source, _cfg(tmp_path))
    assert first.calls is not None and again.calls == first.calls and len(runs) == 1
    assert _capture(source + "\n# another source\n", _cfg(tmp_path)).calls == first.calls and len(runs) == 2
    assert _capture(source, _cfg(tmp_path / "elsewhere")).calls == first.calls and len(runs) == 3
    failing = "raise ValueError('boom')\n"
    assert _capture(failing, _cfg(tmp_path)).calls is None and _capture(failing, _cfg(tmp_path)).calls is None
    assert len(runs) == 5


def test_captures_are_forked_from_one_capture_server(tmp_path: Path) -> None:
    """Under namespaces each capture is a child of this process's capture server (which imported
    torch once), confined like the capture process; the server serves the next capture too."""
    source = (SRC / "module_cpu.py").read_text()
    assert _capture(source + "\n# first\n", _cfg(tmp_path)).calls is not None
    server = build._CAPTURE_SERVER["server"]
    assert build._CAPTURE_SERVER["pid"] == os.getpid() and "given_up" not in build._CAPTURE_SERVER
    assert _capture(source + "\n# second\n", _cfg(tmp_path)).calls is not None
    assert build._CAPTURE_SERVER["server"] is server and server.alive and server.live_children == 0


def test_without_the_capture_server_each_capture_is_a_new_process(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_CAPTURE_SERVER", {})
    cap = _capture((SRC / "module_cpu.py").read_text() + "\n# alone\n", _cfg(tmp_path, capture_server=False))
    assert cap.calls is not None and build._CAPTURE_SERVER == {}


def test_a_capture_server_that_cannot_start_is_given_up_for_new_processes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A real server whose interpreter cannot start: one warning naming why, and the capture (this
    one and the next) runs as a new process with the same result."""
    class Unstartable(ForkServer):
        def __init__(self, environment, *args) -> None:  # noqa: ANN001
            super().__init__(lambda home: dict(environment(home), PYTHONHOME="/nonexistent"), *args)

    monkeypatch.setattr(build, "ForkServer", Unstartable)
    monkeypatch.setattr(build, "_CAPTURE_SERVER", {})
    source = (SRC / "module_cpu.py").read_text()
    with pytest.warns(RuntimeWarning, match="(?s)captures start as new processes.*encodings"):
        first = _capture(source + "\n# first\n", _cfg(tmp_path))
    assert first.calls is not None and "given_up" in build._CAPTURE_SERVER
    assert _capture(source + "\n# second\n", _cfg(tmp_path)).calls == first.calls


def test_a_call_made_only_in_forward_is_malformed_and_says_so(tmp_path: Path) -> None:
    source = _BUILT_IN_CONSTRUCTOR.replace("        if torch.cuda.is_available():\n", "        if False:\n")
    build = build_candidate(MODULE_TASK, source, "cpu", _cfg(tmp_path))
    assert not build.ok and build.reason == "malformed"
    assert "constructing ModelNew(*get_init_inputs())" in build.log and "forward" in build.log


@pytest.mark.parametrize("source, message", [
    ("import torch\nx = 1\n", "no torch.utils.cpp_extension.load_inline call"),
    ("from torch.utils.cpp_extension import load\next = load(name='e', sources=['e.cpp'])\n", "load_inline"),
    ("raise ValueError('boom')\n", "boom"),
    ("def broken(:\n", "SyntaxError"),
    ("from torch.utils.cpp_extension import load_inline\nload_inline('e', 'x', sycl_sources='y')\n", "sycl"),
    ("from torch.utils.cpp_extension import load_inline\nload_inline('bad name', 'x')\n", "C identifier"),
])
def test_capture_failures_are_malformed(tmp_path: Path, source: str, message: str) -> None:
    build = build_candidate(MODULE_TASK, source, "cpu", _cfg(tmp_path))
    assert not build.ok and build.reason == "malformed"
    assert message in build.log


def test_capture_timeout_is_compile_timeout(tmp_path: Path) -> None:
    build = build_candidate(MODULE_TASK, "import time\ntime.sleep(60)\n", "cpu", _cfg(tmp_path, timeout_s=5))
    assert not build.ok and build.reason == "compile_timeout"


@pytest.mark.parametrize("server", [True, False])
def test_a_top_level_that_closes_its_result_pipe_and_hangs_is_compile_timeout(tmp_path: Path, server: bool) -> None:
    """Closing every inherited descriptor (the result pipe among them) must not turn a hang into an
    early end: the capture is still killed at `timeout_s` and the build says compile_timeout."""
    source = "import os, time\nos.closerange(3, 4096)\ntime.sleep(120)\n"
    t0 = time.monotonic()
    build = build_candidate(MODULE_TASK, source, "cpu", _cfg(tmp_path, timeout_s=5, capture_server=server))
    assert not build.ok and build.reason == "compile_timeout", build.log[-500:]
    assert time.monotonic() - t0 < 30


def test_cpu_backend_refuses_cuda_sources(tmp_path: Path) -> None:
    source = (
        "from torch.utils.cpp_extension import load_inline\n"
        "ext = load_inline('e', cpp_sources='void f();', cuda_sources='__global__ void k() {}', functions=['f'])\n"
    )
    build = build_candidate(MODULE_TASK, source, "cpu", _cfg(tmp_path))
    assert not build.ok and build.reason == "compile_error" and "cpu backend" in build.log


@pytest.mark.parametrize("kwargs", [
    dict(cpp_sources="int f() { return 1; }", functions=["f"]),
    dict(cpp_sources=["int f();", "int g();"], cuda_sources="__global__ void k() {}",
         functions={"f": "doc f", "g": "doc g"}),
    dict(cpp_sources="int f();", functions="f", with_pytorch_error_handling=False),
    dict(cpp_sources="int f();", cuda_sources=["a", "b"], no_implicit_headers=True),
])
def test_generated_sources_match_torch_load_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   kwargs: dict) -> None:
    """torch writes main.cpp / cuda.cu then calls _jit_compile: stop there and compare the files."""
    monkeypatch.setattr(cpp_extension, "_jit_compile", lambda *a, **k: None)
    cpp_extension.load_inline("ext", build_directory=str(tmp_path), **copy.deepcopy(kwargs))  # torch mutates lists
    ours = generate_inline_sources(
        kwargs["cpp_sources"], kwargs.get("cuda_sources") or [], kwargs.get("functions"),
        kwargs.get("with_pytorch_error_handling", True), kwargs.get("no_implicit_headers", False))
    theirs = {p.name: p.read_text() for p in tmp_path.iterdir() if p.name in ("main.cpp", "cuda.cu")}
    assert ours == theirs
