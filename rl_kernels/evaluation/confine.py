"""Kernel-enforced confinement for every step that runs candidate-controlled input.

Three steps run something the candidate wrote: the capture of a module candidate's Python top level,
the compilers (which read its source and flags), and the evaluation worker (which loads its code).
Each runs as `unshare` -> this file as a stage script (pid 1 of a new PID namespace) -> the step:

- **user namespace** (root inside maps to the caller; real capabilities are gone, and the stage
  empties the capability bounding set, so the step cannot undo any of the below);
- **PID namespace**: the step sees only its own processes, and when its first process ends the
  kernel kills every other one, so a child that called `setsid()` does not survive;
- **network namespace** with no interfaces but a downed loopback: no network;
- **mount namespace**: every mount read-only; the secrets' places (`$HOME`, `/root`, `/home`,
  `/tmp`, `/run`, the build cache, the checkout the package came from) replaced by empty tmpfs,
  with only what the step needs bound back (interpreter, its packages, the `rl_kernels` package,
  CUDA); a private `/dev` with the standard nodes and the GPU's, and a private `/dev/shm`; only
  the step's own scratch directory (and the device nodes) writable;
- **rlimits**: address space (cpu runs and builds), file size, no core dumps, open files;
- **seccomp** (installed by the worker and the capture step right before candidate code is
  loaded, see `forbid_process_creation`): fork, exec, ptrace, namespace and mount calls, non-local
  sockets and SIGSEGV/SIGBUS handlers kill the process; threads are still allowed.

Where the host refuses a layer (no user namespaces in a container, an old kernel), the step fails
closed with a message naming the layer; `isolation: process` in config runs without the
namespace layers (documented as weaker) on hosts that cannot have them.

This file is a stage script run with `python -I -S`, so it imports the standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import platform
import resource
import shutil
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Places that hold the host's secrets or other users' data: hidden (empty tmpfs) in every step.
HIDDEN_DIRS = ("/root", "/home", "/tmp", "/var/tmp", "/run", "/var/run", "/mnt", "/media")
# Files outside those places that a mapped root could read: replaced by /dev/null.
HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers")
# The device nodes a step may open (a private /dev holds these alone); the GPU's are found by name.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
GPU_DEVICE_PREFIXES = ("nvidia", "dri")


STAGE_FAILED = 125   # exit status of a stage that could not confine itself (never the candidate's)


class ConfinementError(RuntimeError):
    """This host cannot provide a confinement layer the config asks for; the message names it."""


@dataclass
class Confinement:
    """What one confined step may see and do.

    `readable` are bound back read-only after the hidden places are emptied; `writable` are bound
    back read-write (the step's scratch or build directory); `hide` adds places to empty;
    `aliases` are (writable place, another path) pairs: the place is bound a second time there (a
    worker forked from the fork server sees its scratch dir where the server imported, so every
    path an import remembered, its working dir, $HOME, $TMPDIR, is the worker's own).
    `memory_mb` caps the address space (0: no cap; CUDA processes reserve huge virtual ranges).
    """

    readable: list[str] = field(default_factory=list)
    writable: list[str] = field(default_factory=list)
    hide: list[str] = field(default_factory=list)
    aliases: list[list[str]] = field(default_factory=list)
    memory_mb: int = 0
    file_size_mb: int = 2048
    open_files: int = 4096


# ----------------------------------------------------------------------------------------------
# the parent's side


def _checkout() -> Path | None:
    """The source checkout the package runs from (editable install, PYTHONPATH=repo, a Ray job's
    working_dir), or None when it is installed into site-packages."""
    parent = Path(__file__).resolve().parents[2]
    return parent if (parent / "pyproject.toml").is_file() or (parent / ".git").exists() else None


def python_paths() -> list[str]:
    """What a confined Python needs to import torch and rl_kernels, and nothing beside them.

    sys.path entries are bound back, except that a checkout holding the package contributes only
    its `rl_kernels` directory: the rest of the checkout (runs, configs, caches) stays hidden.
    """
    package = Path(__file__).resolve().parents[1]
    checkout = _checkout()
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(package)}
    for entry in sys.path:
        if not entry or not Path(entry).exists():
            continue
        resolved = Path(entry).resolve()
        if resolved == checkout:
            continue
        paths.add(str(resolved))
    return sorted(paths)


def hidden_places(extra: list[str]) -> list[str]:
    """The fixed secret places plus the caller's home, the checkout and `extra` (e.g. the cache)."""
    checkout = _checkout()
    home = os.environ.get("HOME", "")
    places = [*HIDDEN_DIRS, *([str(checkout)] if checkout else []), *extra] + ([home] if home and home != "/" else [])
    return sorted({str(Path(p).resolve()) for p in places if p and Path(p).is_dir()})


def unshare_prefix() -> list[str]:
    exe = shutil.which("unshare")
    if exe is None:
        raise ConfinementError("the namespace sandbox needs `unshare` (util-linux), which is not on PATH; "
                               "install util-linux, or set isolation: process (weaker: no namespaces)")
    return [exe, "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
            "--net", "--ipc", "--uts"]


def confined_argv(cmd: list[str], conf: Confinement) -> list[str]:
    """`cmd` wrapped so that it runs under `conf` (see the module docstring)."""
    spec = json.dumps(asdict(conf))
    return [*unshare_prefix(), sys.executable, "-I", "-S", str(Path(__file__).resolve()), spec, "--", *cmd]


@functools.lru_cache(maxsize=None)
def probe() -> None:
    """Checks once per process that this host provides every layer; ConfinementError otherwise."""
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    conf = Confinement(readable=python_paths(), writable=[str(scratch)], hide=[])
    cmd = [sys.executable, "-I", "-S", "-c", "import sys; sys.exit(0)"]
    try:
        # From the scratch dir it binds back: the caller's working dir may be a hidden place ($HOME, /tmp).
        res = subprocess.run(confined_argv(cmd, conf), capture_output=True, text=True, timeout=60, cwd=scratch)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfinementError(f"cannot start the namespace sandbox: {exc}") from None
    if res.returncode != 0:
        raise ConfinementError("this host refuses the namespace sandbox (user/pid/net/mount namespaces, "
                               f"read-only mounts): {(res.stderr or res.stdout).strip()[-600:]}; "
                               "set isolation: process to run without it (weaker: no namespaces)")


# ----------------------------------------------------------------------------------------------
# the stage (pid 1 inside the namespaces): mounts, capabilities, limits, then exec

_LIBC = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC = 0x2, 0x4, 0x1000, 0x4000
_SYS_MOUNT_SETATTR = 442   # the same on x86_64 and aarch64
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise ConfinementError(f"{what}: {os.strerror(err)} (errno {err})")
    return ret


def _syscall(nr: int, *args: object) -> int:
    _LIBC.syscall.restype = ctypes.c_long
    return _LIBC.syscall(ctypes.c_long(nr), *args)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    _check(_LIBC.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _set_attr(path: str, set_bits: int, clear_bits: int, recursive: bool) -> None:
    attr = struct.pack("=QQQQ", set_bits, clear_bits, 0, 0)   # struct mount_attr
    buf = ctypes.create_string_buffer(attr, len(attr))
    flags = _AT_RECURSIVE if recursive else 0
    _check(_syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), flags, buf, len(attr)), f"mount_setattr {path}")


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mount_layout(conf: Confinement) -> None:
    """Empty the hidden places, bind back what is needed, make everything read-only but `writable`."""
    hidden = sorted({*HIDDEN_DIRS, *conf.hide})
    hidden = [h for h in hidden if os.path.isdir(h) and not os.path.islink(h)]
    hidden = [h for h in hidden if not _under(os.path.dirname(h), hidden)]   # a parent hides it already
    keep = [(p, False) for p in conf.readable if os.path.exists(p)] + [(p, True) for p in conf.writable]
    # Hold the kept trees open before the tmpfs covers them, then bind them back through the fds;
    # writable ones always become their own mount, so they alone can be made read-write.
    held = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path, rw in keep if rw or _under(path, hidden)]
    for place in hidden:
        _mount("tmpfs", place, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=16m,mode=755")
    for name in HIDDEN_FILES:
        if os.path.isfile(name):
            _mount("/dev/null", name, None, _MS_BIND, None)
    for path, fd in sorted(held, key=lambda h: len(h[0])):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        elif not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, None)
        os.close(fd)
    for place, alias in conf.aliases:
        if not _under(place, conf.writable):
            raise ConfinementError(f"alias {alias}: {place} is not a writable place")
        os.makedirs(alias, exist_ok=True)
        _mount(place, alias, None, _MS_BIND | _MS_REC, None)
    devices = _private_dev()
    _set_attr("/", _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, recursive=True)
    # The GPU driver opens its nodes for writing and fails to initialise (CUDA error 304) on a
    # read-only /proc; this /proc is the PID namespace's own.  /sys stays read-only.
    for path in [*conf.writable, *(alias for _, alias in conf.aliases), *devices, "/proc"]:
        _set_attr(path, 0, _MOUNT_ATTR_RDONLY, recursive=False)
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64m,mode=1777")


def _private_dev() -> list[str]:
    """A fresh /dev with only `DEVICES` and the GPU's nodes bound in (no host /dev to write into).

    Returns the bound device paths: they stay writable when the rest is made read-only.
    """
    names = [n for n in os.listdir("/dev") if n in DEVICES or n.startswith(GPU_DEVICE_PREFIXES)]
    held = [(n, os.open(f"/dev/{n}", os.O_PATH | os.O_CLOEXEC)) for n in names]
    _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID, "size=1m,mode=755")
    bound = []
    for name, fd in held:
        path = f"/dev/{name}"
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.mkdir(path)
        else:
            open(path, "w").close()
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, None)
        os.close(fd)
        bound.append(path)
    os.mkdir("/dev/shm")
    for i, std in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"/dev/{std}")
    os.symlink("/proc/self/fd", "/dev/fd")
    return bound


def _drop_capabilities() -> None:
    """Empty the bounding set: after exec, root in this namespace holds no capability at all."""
    for cap in range(64):
        if _LIBC.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    _check(_LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _limits(conf: Confinement) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    size = conf.file_size_mb << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (conf.open_files, conf.open_files))
    if conf.memory_mb:
        limit = conf.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _confine(conf: Confinement) -> None:
    """The mounts, the capability bounding set and the limits, in the namespaces' first process."""
    cwd = os.getcwd()
    _mount_layout(conf)
    os.chdir(cwd)   # the same path, now resolved through the new mounts (else: the hidden original)
    _drop_capabilities()
    _limits(conf)


def stage(spec: str, cmd: list[str]) -> None:
    """Runs inside the fresh namespaces as their pid 1: confine, then become `cmd`."""
    try:
        _confine(Confinement(**json.loads(spec)))
    except (ConfinementError, OSError) as exc:
        sys.stderr.write(f"rl_kernels sandbox: {exc}\n")
        os._exit(STAGE_FAILED)
    os.execvp(cmd[0], cmd)


# ----------------------------------------------------------------------------------------------
# the same confinement for a process forked from a trusted one (`forkserver`): no `unshare`, no exec

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_NOEXEC, _MS_PRIVATE = 0x8, 0x40000
_CAPSET_NR = {"x86_64": 126, "aarch64": 91}
_CAP_VERSION_3 = 0x20080522


def enter_namespaces() -> None:
    """What `unshare_prefix` does for a new process, done by a single-threaded process to itself:
    new user (mapped to the caller's uid and gid), mount (everything private), network, IPC and UTS
    namespaces, and a new PID namespace whose pid 1 is the next child this process forks."""
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS
    _check(_LIBC.unshare(flags), "unshare (user, pid, mount, network, ipc, uts namespaces)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)


def confine_forked(conf: Confinement) -> None:
    """In pid 1 of the namespaces `enter_namespaces` made (the child forked after it): the PID
    namespace's own /proc, then the stage's confinement; and since no exec follows that would drop
    them, the process's own capabilities are cleared here (effective, permitted, inheritable)."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    _confine(conf)
    header = struct.pack("=Ii", _CAP_VERSION_3, 0)
    data = bytes(24)   # two struct __user_cap_data_struct, all zero
    _check(_syscall(_CAPSET_NR[platform.machine()], ctypes.c_char_p(header), ctypes.c_char_p(data)),
           "capset (clear capabilities)")


# ----------------------------------------------------------------------------------------------
# seccomp: installed by the confined process itself, right before candidate code is loaded

_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JSET_K, _BPF_RET_K = 0x20, 0x15, 0x45, 0x06
_CLONE_THREAD = 0x10000
_AF_UNIX = 1
_SIGBUS, _SIGSEGV = 7, 11
# (audit arch, syscalls that kill, clone, clone3, socket, rt_sigaction, seccomp)
_ARCH = {
    "x86_64": (0xC000003E, {
        "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "unshare": 272, "setns": 308, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "keyctl": 250, "add_key": 248, "request_key": 249, "io_uring_setup": 425, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsmount": 432, "mount_setattr": 442, "kexec_load": 246,
        "init_module": 175, "finit_module": 313, "personality": 135,
    }, 56, 435, 41, 13, 317),
    "aarch64": (0xC00000B7, {
        "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "io_uring_setup": 425, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsmount": 432, "mount_setattr": 442, "kexec_load": 104, "init_module": 105,
        "finit_module": 273, "personality": 92,
    }, 220, 435, 198, 134, 277),
}


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_program(machine: str | None = None) -> bytes:
    """The filter as raw BPF: kill on process creation and escapes, allow everything else.

    clone is allowed only with CLONE_THREAD (threads, not processes); clone3 answers ENOSYS, so
    glibc falls back to clone, whose flags the filter can read.  Sockets other than AF_UNIX and
    handlers for SIGSEGV/SIGBUS (computing output pages on first touch) kill the process.
    """
    machine = machine or platform.machine()
    if machine not in _ARCH:
        raise ConfinementError(f"no seccomp filter for {machine}; set isolation: process to run without it")
    arch, kill, clone, clone3, socket, sigaction, _ = _ARCH[machine]
    kill_ret = _bpf(_BPF_RET_K, _SECCOMP_RET_KILL_PROCESS)
    allow = _bpf(_BPF_RET_K, _SECCOMP_RET_ALLOW)
    prog = [_bpf(_BPF_LD_W_ABS, 4), _bpf(_BPF_JEQ_K, arch, 1, 0), kill_ret, _bpf(_BPF_LD_W_ABS, 0)]
    if machine == "x86_64":  # x32 syscalls (nr | 0x40000000) would bypass the table
        prog += [_bpf(0x35, 0x40000000, 0, 1), kill_ret]   # jge
    for nr in sorted(kill.values()):
        prog += [_bpf(_BPF_JEQ_K, nr, 0, 1), kill_ret]
    prog += [_bpf(_BPF_JEQ_K, clone3, 0, 1), _bpf(_BPF_RET_K, _SECCOMP_RET_ERRNO | errno.ENOSYS)]
    # clone: args[0] (flags) must hold CLONE_THREAD
    prog += [_bpf(_BPF_JEQ_K, clone, 0, 4), _bpf(_BPF_LD_W_ABS, 16), _bpf(_BPF_JSET_K, _CLONE_THREAD, 0, 1), allow,
             kill_ret]
    # socket: args[0] (domain) must be AF_UNIX
    prog += [_bpf(_BPF_JEQ_K, socket, 0, 4), _bpf(_BPF_LD_W_ABS, 16), _bpf(_BPF_JEQ_K, _AF_UNIX, 1, 0), kill_ret,
             allow]
    # rt_sigaction: no handler for SIGSEGV / SIGBUS
    prog += [_bpf(_BPF_JEQ_K, sigaction, 0, 4), _bpf(_BPF_LD_W_ABS, 16), _bpf(_BPF_JEQ_K, _SIGSEGV, 1, 0),
             _bpf(_BPF_JEQ_K, _SIGBUS, 0, 1), kill_ret]
    prog.append(allow)
    return b"".join(prog)


def forbid_process_creation() -> None:
    """Installs the seccomp filter on every thread of this process (irrevocable)."""
    prog = seccomp_program()
    count = len(prog) // 8
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = struct.pack("@HP", count, ctypes.addressof(buf))   # struct sock_fprog
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    _check(_LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    nr = _ARCH[platform.machine()][6]
    _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
    ret = _syscall(nr, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, fbuf)
    if ret > 0:
        raise ConfinementError(f"seccomp filter: thread {ret} could not be synchronised")
    _check(ret, "seccomp filter")


if __name__ == "__main__":
    split = sys.argv.index("--")
    stage(sys.argv[1], sys.argv[split + 1:])
