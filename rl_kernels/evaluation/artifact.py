"""Loading build artifacts inside the evaluation subprocess (no compiler needed there).

hgemm artifacts are one `.so` exporting `rlk_hgemm` (plain-C ABI, rlk_abi.h), called via ctypes (the
loader is `rl_kernels.ops.runtime`'s, the one exported kernel libraries use).
module artifacts are one zip of prebuilt Python extensions plus a manifest; `prebuilt_load_inline`
stands in for torch's load_inline and refuses sources other than the ones that were built.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import types
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from rl_kernels.ops.runtime import load_hgemm_entry, load_native_library

__all__ = ["MANIFEST", "generate_inline_sources", "sources_digest", "unpack_artifact", "load_native_library",
           "load_hgemm_entry", "prebuilt_load_inline"]

MANIFEST = "manifest.json"


def generate_inline_sources(
    cpp_sources: list[str],
    cuda_sources: list[str],
    functions: dict[str, str] | list[str] | str | None,
    with_pytorch_error_handling: bool = True,
    no_implicit_headers: bool = False,
) -> dict[str, str]:
    """The files torch's load_inline writes (main.cpp, and cuda.cu when there are CUDA sources).

    Mirrors torch.utils.cpp_extension.load_inline text for text, so a candidate built ahead of time
    compiles exactly what it would have compiled just in time.
    """
    cpp = list([cpp_sources] if isinstance(cpp_sources, str) else cpp_sources)
    cuda = list([cuda_sources] if isinstance(cuda_sources, str) else cuda_sources or [])
    if not no_implicit_headers:
        cpp.insert(0, "#include <torch/extension.h>")
    if functions is not None:
        if isinstance(functions, str):
            functions = [functions]
        if isinstance(functions, list):
            functions = {f: f for f in functions}
        cpp.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for fn, doc in functions.items():
            if with_pytorch_error_handling:
                cpp.append(f'm.def("{fn}", torch::wrap_pybind_function({fn}), "{doc}");')
            else:
                cpp.append(f'm.def("{fn}", {fn}, "{doc}");')
        cpp.append("}")
    files = {"main.cpp": "\n".join(cpp)}
    if cuda:
        if not no_implicit_headers:
            cuda[0:0] = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
        files["cuda.cu"] = "\n".join(cuda)
    return files


def sources_digest(files: dict[str, str]) -> str:
    """sha256 over the generated files, names included, in a fixed order."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()


def unpack_artifact(data: bytes, artifact_name: str, dest_dir: Path) -> Path:
    """Writes an artifact where the loaders expect it: a `.so` as a file, a zip as a directory.

    Returns the `.so` path or the directory holding the unzipped extensions and manifest.
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    if not artifact_name.endswith(".zip"):
        path = dest_dir / Path(artifact_name).name
        path.write_bytes(data)
        return path
    out = dest_dir / Path(artifact_name).stem
    out.mkdir(exist_ok=True)
    zip_path = dest_dir / Path(artifact_name).name
    zip_path.write_bytes(data)
    with zipfile.ZipFile(zip_path) as zf:
        for member in zf.namelist():
            p = PurePosixPath(member)
            if p.is_absolute() or ".." in p.parts or len(p.parts) != 1:
                raise RuntimeError(f"artifact {artifact_name} holds an unexpected path {member!r}")
        zf.extractall(out)
    zip_path.unlink()
    return out


def prebuilt_load_inline(artifact_dir: Path) -> Callable[..., types.ModuleType]:
    """A drop-in for torch.utils.cpp_extension.load_inline that imports the prebuilt extensions.

    It regenerates the sources from the call's arguments and refuses (RuntimeError) any whose hash
    differs from what was built, so a candidate cannot build one thing and run another.
    """
    artifact_dir = Path(artifact_dir)
    manifest = json.loads((artifact_dir / MANIFEST).read_text())["extensions"]
    loaded: dict[str, types.ModuleType] = {}

    def load_inline(
        name: str,
        cpp_sources: Any,
        cuda_sources: Any = None,
        sycl_sources: Any = None,
        functions: Any = None,
        extra_cflags: Any = None,
        extra_cuda_cflags: Any = None,
        extra_sycl_cflags: Any = None,
        extra_ldflags: Any = None,
        extra_include_paths: Any = None,
        build_directory: Any = None,
        verbose: bool = False,
        with_cuda: Any = None,
        with_sycl: Any = None,
        is_python_module: bool = True,
        with_pytorch_error_handling: bool = True,
        keep_intermediates: bool = True,
        use_pch: bool = False,
        no_implicit_headers: bool = False,
    ) -> types.ModuleType:
        if name not in manifest:
            raise RuntimeError(f"extension {name!r} was not built (built: {sorted(manifest)})")
        files = generate_inline_sources(cpp_sources, cuda_sources or [], functions,
                                        with_pytorch_error_handling, no_implicit_headers)
        if sources_digest(files) != manifest[name]["sha256"]:
            raise RuntimeError(f"extension {name!r}: sources differ from the built ones")
        if name not in loaded:
            loaded[name] = _import_extension(name, artifact_dir / manifest[name]["file"])
        return loaded[name]

    return load_inline


def _import_extension(name: str, so_path: Path) -> types.ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(so_path))
    spec = importlib.util.spec_from_file_location(name, str(so_path), loader=loader)
    if spec is None:
        raise RuntimeError(f"cannot make an import spec for {so_path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
