"""What `pip install` puts into a shared site-packages: one top-level package, `rl_kernels`, with the
checkout's `actors/`, `learner/` and `cluster/` under it, working from the wheel alone; and the
library folder itself never imports Ray."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_installs_everything_under_rl_kernels_and_runs_from_there(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "dist"), str(REPO)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("rl_kernels-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"rl_kernels", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                                                 + ".dist-info"}
    for module in ("actors/timer.py", "learner/grpo.py", "cluster/train.py", "ops/runtime.py",
                   "tasks/builtin/hgemm/seed_cpu_fp32.cpp", "evaluation/native/rlk_abi.h"):
        assert f"rl_kernels/{module}" in names, module
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                          str(site), str(wheel)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    script = ("import rl_kernels, rl_kernels.cluster.train, rl_kernels.actors.timer, rl_kernels.learner.trainer\n"
              "import importlib.util\n"
              "print(rl_kernels.cluster.train.__file__)\n"
              "print(*(importlib.util.find_spec(n) for n in ('actors', 'learner', 'cluster')))\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    where, specs = res.stdout.strip().splitlines()
    assert where.startswith(str(site / "rl_kernels" / "cluster")) and specs == "None None None"
    res = subprocess.run([sys.executable, "-m", "rl_kernels.cli", "train", "--dry-run", "train.max_steps=2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "max_steps: 2" in res.stdout, res.stderr[-2000:]


def test_the_library_folder_never_imports_ray() -> None:
    """`rl_kernels/` runs and is tested without Ray; the actors and drivers that use it live beside it."""
    importers = []
    for path in (REPO / "rl_kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "ray" or n.startswith("ray.") for n in names):
                importers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert importers == []
