"""The exported op on a GPU: in its caller's stream order, inside CUDA graphs, and the fallback for a
kernel that a graph cannot hold (a per-call workspace allocation, as CUTLASS's device_memory makes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rl_kernels.config import Config, load_config
from rl_kernels.ops.export import export, from_directory
from rl_kernels.ops.runtime import KernelLibrary, relative_gap

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "rl_kernels" / "tasks" / "builtin" / "hgemm" / "seed_cuda_fp32.cu"
LAUNCH = "  hgemm_tiled_fp32acc<<<grid, block>>>("
WORKSPACE = """  void* workspace = nullptr;   // scratch allocated and freed per call
  TORCH_CHECK(cudaMalloc(&workspace, 1 << 16) == cudaSuccess, "workspace");
"""
FREE = """  TORCH_CHECK(cudaFree(workspace) == cudaSuccess, "workspace free");
}"""

pytestmark = pytest.mark.gpu


def _config(cache_dir: Path) -> Config:
    major, minor = torch.cuda.get_device_capability()
    return load_config(REPO / "configs" / "h200.yaml", [
        f"eval.build.cache_dir={cache_dir}", f"eval.build.cuda_archs=[sm_{major}{minor}{'a' if major >= 9 else ''}]",
        "export.min_speedup=0", "export.reps=10", "export.warmup=2"])


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> KernelLibrary:
    """The cuda seed at 256^3 (default-stream launches) and at 128^3 with a per-call workspace."""
    kernels = tmp_path_factory.mktemp("kernels")
    seed = SEED.read_text()
    assert LAUNCH in seed and seed.rstrip().endswith("}")
    (kernels / "256_256_256.cu").write_text(seed)
    (kernels / "128_128_128.cu").write_text(seed.replace(LAUNCH, WORKSPACE + LAUNCH).rstrip()[:-1] + FREE + "\n")
    cfg = _config(tmp_path_factory.mktemp("cache"))
    lines: list[str] = []
    candidates = from_directory(kernels, "fp32", cfg, lines.append, jobs=2)
    assert len(candidates) == 2, lines
    out = tmp_path_factory.mktemp("export")
    export(candidates, out, "rlk_gpu_test", cfg, [(200, 256, 256)], torch.device("cuda"), "test", lines.append)
    return KernelLibrary(out / "rlk_gpu_test")


def _kernel(library: KernelLibrary, m: int) -> dict:
    return library.kernels[library.plan[(m, m, m, "fp32")]["kernel"]]


def _operands(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(m, k, device="cuda").half(), torch.randn(k, n, device="cuda").half()


def _gap(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    return relative_gap(c, a.float() @ b.float())


def test_export_probes_each_kernel_in_a_graph(library: KernelLibrary) -> None:
    seed, workspace = _kernel(library, 256), _kernel(library, 128)
    assert seed["capturable"] is True and seed["capture"].startswith("captured and replayed"), seed
    assert workspace["capturable"] is False and workspace["capture"].startswith("capture failed"), workspace


def test_the_op_is_ordered_after_its_callers_stream(library: KernelLibrary) -> None:
    """The inputs are written on a side stream behind a long GPU sleep; the kernel, called on that
    stream, must read them (launched on the legacy stream, it would run ahead and read zeros)."""
    a_src, b = _operands(256, 256, 256)
    a = torch.zeros_like(a_src)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)          # ~25 ms of GPU time before the inputs exist
        a.copy_(a_src)
        c = library.hgemm(a, b)
    torch.cuda.synchronize()
    assert library.choose(a, b).path == "exact"
    assert _gap(c, a_src, b) < 1e-2


def _captured(op, calls: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """Each call once eagerly (torch's advice before a capture), then all captured in one graph; the
    inputs get new values and the graph is replayed: the outputs the replay wrote."""
    for a, b in calls:
        op(a, b)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [op(a, b) for a, b in calls]
    for a, _ in calls:
        a.copy_(torch.randn_like(a.float()).half())
    graph.replay()
    torch.cuda.synchronize()
    return outs


def test_a_captured_graph_replays_the_kernel_on_new_inputs(library: KernelLibrary) -> None:
    a, b = _operands(256, 256, 256)
    [c] = _captured(library.hgemm, [(a, b)])
    assert _gap(c, a, b) < 1e-2
    captured = [r for r in library.explain() if (r["m"], r["path"]) == (256, "exact")]
    assert captured and captured[0]["calls"] >= 2


def test_under_capture_a_kernel_that_cannot_be_captured_falls_back_with_its_reason(library: KernelLibrary) -> None:
    a, b = _operands(128, 128, 128)
    assert library.choose(a, b).path == "exact"
    [c] = _captured(library.hgemm, [(a, b)])
    assert _gap(c, a, b) < 1e-2
    fallbacks = [r for r in library.explain() if r["m"] == 128 and r["path"] == "matmul"]
    assert fallbacks and fallbacks[0]["reason"].startswith("CUDA graph capture: kernel ")
    assert "capture failed" in fallbacks[0]["reason"]


@pytest.mark.parametrize("dispatch", ["python", "cpp"])
def test_both_dispatches_capture_the_kernel_and_fall_back_for_the_other(library: KernelLibrary, dispatch: str) -> None:
    """Inside one captured graph: the capturable kernel's shape on its kernel, the workspace kernel's
    shape on torch.matmul; replayed on new inputs, both products right."""
    native = library.native_op()
    assert native is not None, library.native_reason
    op = (lambda a, b: native(a, b, None, "fp32")) if dispatch == "cpp" else library.hgemm
    a1, b1 = _operands(256, 256, 256)
    a2, b2 = _operands(128, 128, 128)
    c1, c2 = _captured(op, [(a1, b1), (a2, b2)])
    assert _gap(c1, a1, b1) < 1e-2 and _gap(c2, a2, b2) < 1e-2
    reasons = [r["reason"] for r in library.explain() if r["m"] == 128 and r["path"] == "matmul"]
    assert any(reason.startswith("CUDA graph capture: kernel ") for reason in reasons), reasons


def test_the_cpp_dispatch_is_ordered_after_its_callers_stream(library: KernelLibrary) -> None:
    native = library.native_op()
    a_src, b = _operands(256, 256, 256)
    a = torch.zeros_like(a_src)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        a.copy_(a_src)
        c = native(a, b, None, "fp32")
    torch.cuda.synchronize()
    assert _gap(c, a_src, b) < 1e-2
