"""The sandbox layers themselves, on real namespaces and a real seccomp filter (no evaluator).

Each test runs a small Python program the way the evaluator runs its worker (`sandbox.worker_command`
with the scrubbed environment) and checks from the host what it could and could not do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_kernels.config import SandboxConfig
from rl_kernels.evaluation import confine, sandbox

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, scratch: Path, isolation: str = "namespaces") -> subprocess.CompletedProcess:
    cmd = sandbox.worker_command([sys.executable, "-c", code], scratch, [], SandboxConfig(isolation=isolation))
    return subprocess.run(cmd, cwd=scratch, env=sandbox.environment(scratch, None), capture_output=True,
                          text=True, timeout=120)


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path.resolve()


def test_the_host_provides_every_layer() -> None:
    confine.probe()


def test_the_probe_works_from_a_working_dir_the_sandbox_hides(tmp_path: Path) -> None:
    """A user's working dir is often under $HOME or /tmp, both hidden from a confined step."""
    here = (tmp_path / "project").resolve()
    here.mkdir()
    code = ("import os, sys; os.chdir(sys.argv[1]); from rl_kernels.evaluation import confine; "
            "confine.probe(); print('probed')")
    out = subprocess.run([sys.executable, "-c", code, str(here)], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "probed", out.stderr[-1500:]


def test_only_the_scratch_dir_is_writable_and_secrets_are_hidden(scratch: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"            # a file of the caller's, under /tmp like ~/.ray or a cache
    secret.write_text("token-123")
    marker = tmp_path / "marker"
    code = f"""
import os, json
out = {{}}
for path in [{str(marker)!r}, "/etc/rlk-marker", {str(REPO / 'rlk-marker')!r}]:
    try:
        open(path, "w").write("x"); out[path] = "written"
    except OSError as exc:
        out[path] = exc.strerror
open("ok.txt", "w").write("fine")
try:
    out["secret"] = open({str(secret)!r}).read()
except OSError as exc:
    out["secret"] = exc.strerror
out["shadow"] = open("/etc/shadow").read()
out["checkout"] = sorted(os.listdir({str(REPO)!r}))
out["home"] = sorted(os.listdir(os.path.expanduser("~")))
print(json.dumps(out))
"""
    res = _run(code, scratch)
    assert res.returncode == 0, res.stderr
    out = __import__("json").loads(res.stdout)
    assert not marker.exists() and not (REPO / "rlk-marker").exists()
    assert all(v != "written" for k, v in out.items() if k.startswith("/")), out
    assert (scratch / "ok.txt").read_text() == "fine"
    assert out["secret"] == "No such file or directory"
    assert out["shadow"] == ""
    assert ".git" not in out["checkout"] and "rl_kernels" in out["checkout"]   # only the package is bound back
    assert out["home"] == ["ok.txt"]                                            # HOME is the scratch dir


def test_no_network_and_a_scrubbed_environment(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "key-456")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "token-789")
    res = _run("import os, socket\nprint(sorted(os.environ))\n"
               "s = socket.socket()\ntry:\n    s.connect(('1.1.1.1', 80))\nexcept OSError as e:\n    print(e.errno)\n",
               scratch)
    assert res.returncode == 0, res.stderr
    names, errno_line = res.stdout.strip().splitlines()
    assert "WANDB_API_KEY" not in names and "RAY_AUTH_TOKEN" not in names
    assert int(errno_line) in (101, 113)    # network unreachable / no route: no interface but a downed lo


def _survivors(tag: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and tag in (proc / "cmdline").read_text():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.parametrize("isolation", ["namespaces", "process"])
def test_a_setsid_child_does_not_survive(scratch: Path, isolation: str) -> None:
    tag = f"3600.{os.getpid()}{len(isolation)}"
    code = (f"import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
            f"    null = os.open(os.devnull, os.O_RDWR)\n    [os.dup2(null, fd) for fd in (0, 1, 2)]\n"
            f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep({tag})'])\n")
    res = _run(code, scratch, isolation)
    assert res.returncode == 0, res.stderr
    time.sleep(0.5)
    left = _survivors(tag)
    try:
        if isolation == "namespaces":
            assert left == [], "a setsid child outlived the confined step"
        else:
            assert left, "without namespaces the child escapes the process group (why namespaces are the default)"
    finally:
        for pid in left:
            os.kill(pid, 9)


def test_seccomp_kills_process_creation_and_foreign_sockets_but_not_threads(scratch: Path) -> None:
    prefix = "from rl_kernels.evaluation import confine\nconfine.forbid_process_creation()\n"
    threads = _run(prefix + "import threading\nt = threading.Thread(target=print, args=('t',))\nt.start(); t.join()\n"
                   "import socket\nsocket.socketpair()\nprint('ok')\n", scratch)
    assert threads.returncode == 0 and threads.stdout.split() == ["t", "ok"], threads.stderr
    for attack in ("import os\nos.fork()", "import os\nos.execv('/bin/true', ['true'])",
                   "import socket\nsocket.socket(socket.AF_INET6)",
                   "import signal\nsignal.signal(signal.SIGSEGV, lambda *a: None)",
                   "import subprocess\nsubprocess.run(['true'])"):
        res = _run(prefix + attack, scratch)
        assert res.returncode == -31, (attack, res.returncode, res.stderr[-300:])   # SIGSYS


def test_the_filter_refuses_an_unknown_machine() -> None:
    with pytest.raises(confine.ConfinementError, match="no seccomp filter for sparc"):
        confine.seccomp_program("sparc")


def test_an_installed_package_outside_a_checkout_is_importable(tmp_path: Path) -> None:
    """Installed into site-packages (no pyproject.toml beside it), the directory holding the package
    is no checkout to hide: the confined step must still import it and what is installed beside it."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "rl_kernels", site / "rl_kernels", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "installed_beside.py").write_text("VALUE = 42\n")   # a dependency in the same site-packages
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from rl_kernels.evaluation import confine, sandbox\n"
            "from rl_kernels.config import SandboxConfig\n"
            "import subprocess, pathlib\n"
            "s = pathlib.Path(sys.argv[2])\n"
            "cmd = sandbox.worker_command([sys.executable, '-c', 'import rl_kernels.evaluation.worker, torch, installed_beside; print(rl_kernels.__file__)'],"
            " s, [], SandboxConfig())\n"
            "env = dict(sandbox.environment(s, None), PYTHONPATH=sys.argv[1])\n"
            "r = subprocess.run(cmd, cwd=s, env=env, capture_output=True, text=True)\n"
            "print(r.returncode, r.stdout.strip(), r.stderr[-400:])\n")
    res = subprocess.run([sys.executable, "-c", code, str(site), str(scratch.resolve())], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"0 {site / 'rl_kernels' / '__init__.py'}"), res.stdout
