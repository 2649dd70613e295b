"""The audit hook of the evaluation subprocess, exercised in a real child interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json, os, socket, subprocess, sys
from pathlib import Path
from rl_kernels.evaluation import sandbox_policy
scratch, outside = Path(sys.argv[1]), Path(sys.argv[2])
v = sandbox_policy.install(scratch, [])
results = {}
def attempt(name, fn):
    try:
        fn()
        results[name] = "allowed"
    except PermissionError:
        results[name] = "refused"
attempt("write_inside", lambda: (scratch / "ok.txt").write_text("x"))
attempt("read_outside", lambda: open(sys.executable, "rb").close())
attempt("write_outside", lambda: outside.write_text("x"))
attempt("remove_outside", lambda: os.remove(str(outside)))
attempt("system", lambda: os.system("true"))
attempt("popen", lambda: subprocess.run(["true"]))
attempt("fork", lambda: os.fork())
attempt("socket", lambda: socket.socket().connect(("127.0.0.1", 9)))
attempt("settrace", lambda: sys.settrace(None))
import ctypes
attempt("dlopen", lambda: ctypes.CDLL("/lib/x86_64-linux-gnu/libc.so.6"))
print(json.dumps({"results": results, "violations": sorted({k for k, _ in v.items})}))
"""


def test_audit_hook_refuses_escapes(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outside = tmp_path / "outside.txt"
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(scratch), str(outside)],
                         capture_output=True, text=True, timeout=120, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    r = data["results"]
    assert r["write_inside"] == "allowed" and r["read_outside"] == "allowed"
    for name in ("write_outside", "remove_outside", "system", "popen", "fork", "socket", "settrace", "dlopen"):
        assert r[name] == "refused", name
    assert not outside.exists()
    assert set(data["violations"]) == {"file_access", "process_spawn", "network_access", "monkeypatch"}
