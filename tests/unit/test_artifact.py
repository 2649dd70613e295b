"""Artifacts: module builds round-trip through bytes and load only the sources that were built."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import torch

from rl_kernels.config import BuildConfig
from rl_kernels.evaluation.artifact import MANIFEST, prebuilt_load_inline, unpack_artifact
from rl_kernels.evaluation.build import build_candidate
from rl_kernels.types import Build, Task

SRC = Path(__file__).resolve().parents[1] / "candidates" / "build"
MODULE_TASK = Task(id="add", kind="module")


@pytest.fixture(scope="session")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for all module builds, so the torch precompiled header is built once per session."""
    return tmp_path_factory.mktemp("module_build_cache")


@pytest.fixture(scope="session")
def module_build(module_cache: Path) -> Build:
    build = build_candidate(MODULE_TASK, (SRC / "module_cpu.py").read_text(), "cpu",
                            BuildConfig(cache_dir=module_cache))
    assert build.ok, build.log
    return build


def _exec_candidate(source: str, load_inline) -> dict:
    """What the evaluation worker does: run the candidate with load_inline served from the artifact."""
    from torch.utils import cpp_extension

    real = cpp_extension.load_inline
    cpp_extension.load_inline = load_inline
    try:
        namespace: dict = {"__name__": "candidate"}
        exec(compile(source, "<candidate>", "exec"), namespace)
    finally:
        cpp_extension.load_inline = real
    return namespace


@pytest.mark.slow
def test_module_build_runs_from_its_artifact(module_build: Build, module_cache: Path, tmp_path: Path) -> None:
    assert module_build.artifact_name == "module.zip"
    assert any((module_cache / "pch").rglob("*.gch")), "the cpu backend should use a precompiled torch header"
    artifact_dir = unpack_artifact(module_build.artifact, module_build.artifact_name, tmp_path)
    manifest = json.loads((artifact_dir / MANIFEST).read_text())["extensions"]
    assert manifest["rlk_test_add"]["file"] == "rlk_test_add.so"
    namespace = _exec_candidate((SRC / "module_cpu.py").read_text(), prebuilt_load_inline(artifact_dir))
    model = namespace["ModelNew"]()
    a, b = torch.randn(1000), torch.randn(1000)
    assert torch.equal(model(a, b), a + b)


@pytest.mark.slow
def test_module_build_is_cached(module_build: Build, module_cache: Path) -> None:
    again = build_candidate(MODULE_TASK, (SRC / "module_cpu.py").read_text(), "cpu", BuildConfig(cache_dir=module_cache))
    assert again.cached and again.key == module_build.key and again.artifact == module_build.artifact


@pytest.mark.slow
def test_prebuilt_load_inline_refuses_other_sources(module_build: Build, tmp_path: Path) -> None:
    load_inline = prebuilt_load_inline(unpack_artifact(module_build.artifact, module_build.artifact_name, tmp_path))
    with pytest.raises(RuntimeError, match="sources differ from the built ones"):
        load_inline(name="rlk_test_add", cpp_sources="torch::Tensor add_fwd(torch::Tensor a);", functions=["add_fwd"])
    with pytest.raises(RuntimeError, match="was not built"):
        load_inline(name="other", cpp_sources="", functions=["f"])


def test_unpack_refuses_paths_outside_the_artifact(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(MANIFEST, "{}")
        zf.writestr("../escape.so", b"x")
    with pytest.raises(RuntimeError, match="unexpected path"):
        unpack_artifact(buf.getvalue(), "module.zip", tmp_path / "dest")
    assert not (tmp_path / "escape.so").exists()
