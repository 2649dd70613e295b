"""In-process policy of the evaluation subprocess: a Python audit hook that refuses escapes.

Audit hooks cannot be removed once installed, so candidate Python code cannot switch this off.  It
complements the static gate (which rejects such code before any build) and the process-level
limits set by `sandbox.py`; native code is constrained by the gate and by killing the process group.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_SPAWN_EVENTS = {
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg",
}
_NETWORK_PREFIXES = ("socket.", "urllib.", "http.client.", "ftplib.", "smtplib.")
_TRACE_EVENTS = {"sys.settrace", "sys.setprofile", "sys.addaudithook"}
_FS_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.unlink", "shutil.rmtree", "shutil.move",
              "os.truncate", "os.chmod", "os.chown", "os.symlink", "os.link", "os.mkdir"}
# Loaded by torch itself through ctypes while timing (NVML for the SM clock).
_SYSTEM_LIBS = {"libnvidia-ml.so.1", "libnvidia-ml.so"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Violations:
    """What the candidate tried; read by the worker after the candidate ran."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, kind: str, detail: str) -> None:
        self.items.append((kind, detail))


def _inside(path: object, root: Path) -> bool:
    if isinstance(path, int):
        return True
    try:
        p = Path(os.fsdecode(path)).resolve()
    except (TypeError, ValueError, OSError):
        return False
    return p == root or root in p.parents


def _inside_any(path: object, roots: list[Path]) -> bool:
    return any(_inside(path, root) for root in roots)


def _is_write(mode: object, flags: object) -> bool:
    if isinstance(mode, str) and any(ch in mode for ch in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def install(scratch: Path, allowed_libs: list[Path], also_writable: list[Path] = ()) -> Violations:
    """Install the hook.  Writes are allowed only under `scratch` and `also_writable` (torch's own
    compile caches, which torch touches lazily); dlopen only of `allowed_libs`."""
    roots = [scratch.resolve(), *(p.resolve() for p in also_writable)]
    libs = {p.resolve() for p in allowed_libs}
    found = Violations()

    def hook(event: str, args: tuple) -> None:
        if event in _SPAWN_EVENTS:
            found.add("process_spawn", event)
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event.startswith(_NETWORK_PREFIXES):
            found.add("network_access", event)
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in _TRACE_EVENTS:
            found.add("monkeypatch", event)
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open" and len(args) >= 3 and _is_write(args[1], args[2]) and not _inside_any(args[0], roots):
            found.add("file_access", f"write to {args[0]!r}")
            raise PermissionError(f"sandbox: writing {args[0]!r} outside the scratch dir")
        if event in _FS_EVENTS and args and not _inside_any(args[0], roots):
            found.add("file_access", f"{event} {args[0]!r}")
            raise PermissionError(f"sandbox: {event} outside the scratch dir")
        if event == "ctypes.dlopen" and args and args[0] is not None:
            target = Path(os.fsdecode(args[0]))
            allowed = target.resolve() in libs if target.is_absolute() else target.name in _SYSTEM_LIBS
            if not allowed:
                found.add("process_spawn", f"dlopen {target}")
                raise PermissionError(f"sandbox: loading {target} is not allowed")

    sys.addaudithook(hook)
    return found
