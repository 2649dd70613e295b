"""hgemm task kind: ids, the CUDA-L2 grid, the fp32 reference, and the seeds / test kernels built
through the real pipeline (cpu kernels also run here; CUDA ones are compile-checked, and run on a GPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rl_kernels.config import BuildConfig, EvalConfig
from rl_kernels.evaluation.artifact import load_hgemm_entry, unpack_artifact
from rl_kernels.evaluation.build import build_candidate, detect_hgemm_entry
from rl_kernels.evaluation.cublas import CublasNotFound, find_cublas
from rl_kernels.tasks.hgemm import HGEMM_SIZES, hgemm_id, hgemm_reference, hgemm_suite, hgemm_task, parse_hgemm_id
from rl_kernels.types import HgemmSpec

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates" / "hgemm"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


# ---------------------------------------------------------------------------------------------
# ids and the grid


def test_parse_and_round_trip() -> None:
    spec = parse_hgemm_id("hgemm/fp32/4096_1024_64")
    assert spec == HgemmSpec(m=4096, n=1024, k=64, accumulator="fp32")
    assert hgemm_id(spec) == "hgemm/fp32/4096_1024_64"
    assert parse_hgemm_id("hgemm/fp16/37_53_29") == HgemmSpec(37, 53, 29, "fp16")  # off-grid shapes parse


def test_suite_is_the_cuda_l2_grid() -> None:
    tasks = hgemm_suite()
    assert len(tasks) == 2000 == 2 * len(HGEMM_SIZES) ** 3
    assert len({t.id for t in tasks}) == 2000
    for t in tasks:
        assert t.kind == "hgemm" and t.hgemm is not None and parse_hgemm_id(t.id) == t.hgemm
    assert {t.hgemm.accumulator for t in tasks if t.hgemm} == {"fp16", "fp32"}
    assert "hgemm/fp32/16384_12288_64" in {t.id for t in tasks}
    assert len(hgemm_suite(("fp32",))) == 1000
    with pytest.raises(ValueError, match="accumulator 'bf16'"):
        hgemm_suite(("bf16",))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad, fragment", [
    ("gemm/fp32/64_64_64", "must look like"),
    ("hgemm/fp32/64_64_64/", "must look like"),
    ("hgemm/fp64/64_64_64", "accumulator 'fp64'"),
    ("hgemm/fp32/64_64", "three sizes"),
    ("hgemm/fp32/64_64_64_64", "three sizes"),
    ("hgemm/fp32/0_64_64", "M='0'"),
    ("hgemm/fp32/64_-8_64", "N='-8'"),
    ("hgemm/fp32/64_64_064", "K='064'"),
    ("hgemm/fp32/64_64_x", "K='x'"),
])
def test_bad_ids_are_rejected_with_the_reason(bad: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_hgemm_id(bad)


def test_task_carries_spec_description_and_seeds() -> None:
    task = hgemm_task("hgemm/fp16/128_256_512")
    assert task.hgemm == HgemmSpec(128, 256, 512, "fp16")
    assert "C[128x256]" in task.description and "fp16" in task.description
    assert set(task.seeds) == {"cuda", "cpu"}
    for source in task.seeds.values():
        assert detect_hgemm_entry(source) == "hgemm_seed"
    assert "__hfma" in task.seeds["cuda"]
    assert "__hfma" not in hgemm_task("hgemm/fp32/128_256_512").seeds["cuda"]


# ---------------------------------------------------------------------------------------------
# reference


def test_reference_is_the_fp32_product() -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(5, 7, generator=gen).half()
    b = torch.randn(7, 3, generator=gen).half()
    exact = a.double() @ b.double()
    for acc in ("fp16", "fp32"):
        ref = hgemm_reference(a, b, acc)
        assert ref.dtype == torch.float32 and ref.shape == (5, 3)
        torch.testing.assert_close(ref.double(), exact, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="A\\[MxK\\] and B\\[KxN\\]"):
        hgemm_reference(a, a, "fp32")
    with pytest.raises(ValueError, match="accumulator"):
        hgemm_reference(a, b, "tf32")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# kernels built through the real pipeline


@pytest.fixture(scope="module")
def build_cfg(tmp_path_factory: pytest.TempPathFactory) -> BuildConfig:
    return BuildConfig(cache_dir=tmp_path_factory.mktemp("hgemm-build-cache"))


def _cpu_entry(source: str, task_id: str, cfg: BuildConfig, dest: Path):
    build = build_candidate(hgemm_task(task_id), source, "cpu", cfg)
    assert build.ok, build.log
    return load_hgemm_entry(unpack_artifact(build.artifact, build.artifact_name, dest))


def _inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=gen) * k ** -0.25).half()
    b = (torch.randn(k, n, generator=gen) * k ** -0.25).half()
    b_col_major = b.t().contiguous().view(k, n)
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    return a, b, b_col_major, c


def _fp16_accumulate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Sequential fp16 accumulation in k order, exactly as the cpu fp16 seed rounds it."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for p in range(a.shape[1]):
        acc = (acc.float() + a[:, p:p + 1].float() * b[p:p + 1, :].float()).half()
    return acc


CPU_FP32_KERNELS = ["seed_fp32", "cpu_naive.cpp", "cpu_blocked.cpp"]


def _cpu_source(name: str) -> str:
    if name.startswith("seed_"):
        return hgemm_task(f"hgemm/{name[5:]}/64_64_64").seeds["cpu"]
    return (CANDIDATES / name).read_text()


@pytest.mark.parametrize("name", CPU_FP32_KERNELS)
@pytest.mark.parametrize("shape", [(64, 128, 96), (37, 300, 29)])
def test_cpu_fp32_kernels_match_reference(name: str, shape: tuple[int, int, int], build_cfg: BuildConfig,
                                          tmp_path: Path) -> None:
    m, n, k = shape
    entry = _cpu_entry(_cpu_source(name), f"hgemm/fp32/{m}_{n}_{k}", build_cfg, tmp_path)
    a, b, b_col_major, c = _inputs(m, n, k)
    entry(a, b, b_col_major, c)
    ref = hgemm_reference(a, b, "fp32")
    # fp32 accumulation: only the final rounding to half separates the kernel from the reference.
    torch.testing.assert_close(c.float(), ref, rtol=1e-3, atol=1e-3)


def test_cpu_fp16_seed_rounds_every_partial_sum(build_cfg: BuildConfig, tmp_path: Path) -> None:
    m, n, k = 24, 40, 200
    entry = _cpu_entry(_cpu_source("seed_fp16"), f"hgemm/fp16/{m}_{n}_{k}", build_cfg, tmp_path)
    a, b, b_col_major, c = _inputs(m, n, k, seed=1)
    entry(a, b, b_col_major, c)
    assert torch.equal(c, _fp16_accumulate(a, b))
    ref = hgemm_reference(a, b, "fp16")
    relnorm = ((c.float() - ref).norm() / ref.norm()).item()
    assert 0 < relnorm < EvalConfig().correctness.hgemm_fp16_acc_relnorm_per_sqrt_k * k ** 0.5


def test_kernel_errors_surface_as_exceptions(build_cfg: BuildConfig, tmp_path: Path) -> None:
    entry = _cpu_entry(_cpu_source("seed_fp32"), "hgemm/fp32/8_8_8", build_cfg, tmp_path)
    a, b, b_col_major, _ = _inputs(8, 8, 8)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        entry(a, b, b_col_major, torch.empty(8, 9, dtype=torch.float16))


@needs_nvcc
@pytest.mark.parametrize("acc", ["fp16", "fp32"])
def test_cuda_seeds_compile(acc: str, build_cfg: BuildConfig) -> None:
    task = hgemm_task(f"hgemm/{acc}/64_64_64")
    build = build_candidate(task, task.seeds["cuda"], "cuda", build_cfg)
    assert build.ok, build.log


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("name", ["naive.cu", "tiled_fp32acc.cu", "wmma_fp32acc.cu", "cute_sm90.cu"])
def test_cuda_candidates_compile(name: str, build_cfg: BuildConfig) -> None:
    build = build_candidate(hgemm_task("hgemm/fp32/256_256_256"), (CANDIDATES / name).read_text(), "cuda",
                            build_cfg)
    assert build.ok, build.log


CUDA_KERNELS = {  # name -> (source, accumulator, shapes it supports)
    "seed_fp32": ("seed_fp32", "fp32", [(256, 384, 128), (37, 300, 29)]),
    "seed_fp16": ("seed_fp16", "fp16", [(256, 384, 1024), (37, 300, 29)]),
    "naive.cu": ("naive.cu", "fp32", [(256, 384, 128), (37, 300, 29)]),
    "tiled_fp32acc.cu": ("tiled_fp32acc.cu", "fp32", [(256, 384, 128), (37, 300, 29)]),
    "wmma_fp32acc.cu": ("wmma_fp32acc.cu", "fp32", [(256, 384, 128), (48, 80, 32)]),
    "cute_sm90.cu": ("cute_sm90.cu", "fp32", [(256, 384, 128), (1024, 512, 4096)]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CUDA_KERNELS))
def test_cuda_kernels_match_reference(name: str, build_cfg: BuildConfig, tmp_path: Path) -> None:
    key, acc, shapes = CUDA_KERNELS[name]
    source = (hgemm_task(f"hgemm/{acc}/64_64_64").seeds["cuda"] if key.startswith("seed_")
              else (CANDIDATES / key).read_text())
    major, minor = torch.cuda.get_device_capability()
    cfg = build_cfg.model_copy(update={"cuda_archs": [f"sm_{major}{minor}{'a' if major >= 9 else ''}"]})
    tol = EvalConfig().correctness
    for m, n, k in shapes:
        task = hgemm_task(f"hgemm/{acc}/{m}_{n}_{k}")
        build = build_candidate(task, source, "cuda", cfg)
        assert build.ok, build.log
        entry = load_hgemm_entry(unpack_artifact(build.artifact, build.artifact_name, tmp_path / f"{m}_{n}_{k}"))
        a, b, b_col_major, c = (t.cuda() for t in _inputs(m, n, k))
        entry(a, b, b_col_major, c)
        torch.cuda.synchronize()
        ref = hgemm_reference(a, b, acc)
        relnorm = ((c.float() - ref).norm() / ref.norm()).item()
        bound = tol.hgemm_fp32_acc_relnorm if acc == "fp32" else tol.hgemm_fp16_acc_relnorm_per_sqrt_k * k ** 0.5
        assert relnorm < bound, f"{name} {m}x{n}x{k}: relnorm {relnorm:.2e} >= {bound:.2e}"


# ---------------------------------------------------------------------------------------------
# locating cuBLAS for the baselines (the baselines themselves: tests/gpu/test_cublas.py)


def _fake_install(root: Path, lib_names: list[str]) -> None:
    (root / "include").mkdir(parents=True)
    (root / "lib").mkdir()
    for header in ("cublas_v2.h", "cublasLt.h"):
        (root / "include" / header).write_text("")
    for name in lib_names:
        (root / "lib" / name).write_text("")


def test_find_cublas_accepts_wheel_layout_with_versioned_libs_only(tmp_path: Path) -> None:
    _fake_install(tmp_path / "cu13", ["libcublas.so.13", "libcublasLt.so.13", "libcublas.so.13.1.0"])
    found = find_cublas(roots=[tmp_path / "missing", tmp_path / "cu13"])
    assert found.include_dir == tmp_path / "cu13" / "include"
    assert found.libs == {"cublas": tmp_path / "cu13" / "lib" / "libcublas.so.13",
                          "cublasLt": tmp_path / "cu13" / "lib" / "libcublasLt.so.13"}


def test_find_cublas_names_what_it_searched(tmp_path: Path) -> None:
    _fake_install(tmp_path / "partial", ["libcublas.so"])  # no cublasLt
    with pytest.raises(CublasNotFound, match="partial"):
        find_cublas(roots=[tmp_path / "partial"])
