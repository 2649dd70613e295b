"""The split boundary's parts on real processes: shared input sets, the asymmetric channel, the
judge's view of a runner that refuses, dies or lies about its clock, and the judge's memory out of
the runner's reach."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rl_kernels.config import SandboxConfig, TimingConfig
from rl_kernels.evaluation import channel, sandbox, shared
from rl_kernels.evaluation.judge import RunnerProcess, check_clock
from rl_kernels.evaluation.problems import InputSet, _guarded, guard_elems
from rl_kernels.evaluation.reasons import Reason, Rejected


def _child(fn) -> int:  # noqa: ANN001 - runs fn in a forked child, returns its exit status
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if fn() else 3
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_shared_set_is_the_same_memory_in_both_processes_views_and_guards_included() -> None:
    """The other process writes the output through its mapping (one element past the end too): the
    judge sees the values in place and its guard region records the out-of-bounds write."""
    a, a_guards = _guarded(12, (3, 4), torch.float16, "cpu", float("nan"))
    a.copy_(torch.arange(12, dtype=torch.float16).view(3, 4))
    c, c_guards = _guarded(6, (2, 3), torch.float16, "cpu", None)
    s = InputSet([a, a.t(), 7], [c], a_guards + c_guards)
    exported = shared.share([s], "cpu")
    judge_end, runner_end = socket.socketpair()
    channel.send_order(judge_end, {"descriptor": exported.descriptor}, exported.fds)
    exported.close_fds()

    def runner_side() -> bool:
        order, fds = channel.recv_order(runner_end)
        (mapped,), _keep = shared.attach(order["descriptor"], fds, "cpu")
        x, xt, seven = mapped.args
        ok = seven == 7 and torch.equal(xt, x.t()) and float(x[2, 3]) == 11.0
        out = mapped.outputs[0]
        out.copy_(torch.full((2, 3), 5.0))
        torch.empty(0, dtype=out.dtype).set_(out.untyped_storage(), out.storage_offset() + 6, (1,), (1,)).fill_(9.0)
        return ok

    assert _child(runner_side) == 0
    assert torch.equal(s.outputs[0], torch.full((2, 3), 5.0, dtype=torch.float16))
    assert float(s.guards[-1][0]) == 9.0 and len(s.guards[-1]) == guard_elems((2, 3))   # the judge sees the overrun


def test_the_runner_cannot_send_pickles_or_oversized_reports() -> None:
    judge_end, runner_end = socket.socketpair()
    channel.send_report(runner_end, {"ms": [0.5, 0.25]})
    assert channel.recv_report(judge_end) == {"ms": [0.5, 0.25]}
    runner_end.sendall(struct.pack("!I", 5) + b"\x80\x04N.\x00")   # a pickle where JSON belongs
    with pytest.raises(ValueError):
        channel.recv_report(judge_end)
    judge_end, runner_end = socket.socketpair()
    runner_end.sendall(struct.pack("!I", channel.MAX_REPORT_BYTES + 1))
    with pytest.raises(channel.ChannelClosed, match="byte report"):
        channel.recv_report(judge_end)


def test_a_runner_refusal_and_a_runner_death_reach_the_judge_as_reasons(tmp_path: Path) -> None:
    runner = RunnerProcess(tmp_path, close_in_child=[])
    try:
        with pytest.raises(Rejected) as refused:   # an order before setup: the runner answers with a reason
            runner.ask({"op": "run", "tag": "pool", "sets": [0], "timed": True})
        assert refused.value.reason == Reason.RUNTIME_ERROR and "setup must come first" in refused.value.detail
        os.kill(runner.pid, signal.SIGSYS)          # what the seccomp filter does to a forbidden call
        with pytest.raises(Rejected) as killed:
            runner.ask({"op": "finish"})
        assert killed.value.reason == Reason.SANDBOX_VIOLATION and "seccomp" in killed.value.detail
    finally:
        runner.close()
    assert runner.returncode == -signal.SIGSYS


def test_a_stopped_runner_does_not_run() -> None:
    """While the judge times the baseline the runner is stopped: a thread of its own cannot spin."""
    runner = RunnerProcess(Path("/tmp"), close_in_child=[])
    try:
        runner.stop()
        deadline = time.monotonic() + 5
        state = ""
        while time.monotonic() < deadline and state != "T":
            state = Path(f"/proc/{runner.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state == "T"
        runner.resume()
    finally:
        runner.close()


_PROBE = """
import os, socket, sys
from rl_kernels.evaluation.judge import become_undumpable
judge_end, other_end = socket.socketpair()
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "undumpable":
        become_undumpable()
    judge_end.send(b"r"); judge_end.recv(1); os._exit(0)
other_end.recv(1)
seen = []
for action in (lambda: open(f"/proc/{pid}/mem", "r+b"), lambda: open(f"/proc/{pid}/fd/1", "w")):
    try:
        action(); seen.append("opened")
    except PermissionError:
        seen.append("denied")
other_end.send(b"d"); os.waitpid(pid, 0)
print(" ".join(seen))
"""


@pytest.mark.parametrize("judge", ["undumpable", "dumpable"])
def test_the_judge_memory_is_out_of_the_runner_reach(judge: str, tmp_path: Path) -> None:
    """In the sandbox (same uid, no capabilities) a process can open a same-uid process's memory and
    its descriptors (the result pipe, say) through /proc unless that process made itself undumpable,
    as the judge does."""
    scratch = tmp_path.resolve()
    cmd = sandbox.worker_command([sys.executable, "-c", _PROBE, judge], scratch, [], SandboxConfig())
    res = subprocess.run(cmd, cwd=scratch, env=sandbox.environment(scratch, None), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-800:]
    assert res.stdout.split() == (["denied", "denied"] if judge == "undumpable" else ["opened", "opened"])


def test_a_runner_that_understates_its_calls_is_caught_by_the_judge_wall_clock() -> None:
    cfg = TimingConfig()
    baseline = [(10 * 1.30, 10 * 1.0, 10)] * 3              # 1.0 ms calls, 0.3 ms of harness each
    honest = [(10 * 2.35, 10 * 2.0, 10)] * 3                # 2.0 ms calls, a little more harness
    figures = check_clock(honest, baseline, cfg)
    assert figures["candidate_unexplained_ms"] == pytest.approx(0.35)
    forged = [(10 * 4.3, 10 * 0.5, 10)] * 3                 # 4 ms calls reported as 0.5 ms
    with pytest.raises(Rejected) as caught:
        check_clock(forged, baseline, cfg)
    assert caught.value.reason == Reason.TIMER_PATCHED


def test_the_runner_imports_its_preload_before_any_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the audit and the profiler import on first use is imported as the runner starts, in the
    runner itself (here a module that writes its importer's pid), with no order sent."""
    (tmp_path / "rlk_preload_marker.py").write_text(
        "import os, pathlib\npathlib.Path(__file__).with_suffix('.pid').write_text(str(os.getpid()))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = RunnerProcess(tmp_path, close_in_child=[], preload=("rlk_preload_marker",))
    try:
        marker = tmp_path / "rlk_preload_marker.pid"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not marker.is_file():
            time.sleep(0.05)
        assert marker.is_file() and int(marker.read_text()) == runner.pid
        assert "rlk_preload_marker" not in sys.modules     # the judge did not import it
    finally:
        runner.close()


def test_with_device_ahead_a_worker_is_prepared_only_once_its_runner_made_its_context(tmp_path: Path) -> None:
    """`prepare(device_ahead=True)` returns (and the worker would say ready) only after the judge and
    the runner each created their CUDA context: here a stand-in that takes 0.5 s in the runner and
    writes who ran it, so an early return would find no runner's mark.  Run in a forked child: the
    judge's side would otherwise touch this test process's device."""
    from rl_kernels.evaluation import worker

    def stand_in(with_blas: bool) -> None:
        if not with_blas:               # the runner's side (no cuBLAS handle there)
            time.sleep(0.5)
        (tmp_path / f"ahead-{'judge' if with_blas else 'runner'}").write_text(str(os.getpid()))

    def prepared() -> bool:
        worker.context_ahead = stand_in
        runner = worker.prepare(tmp_path, [], split=True, warm_compile=False, dispatch_tools=False,
                                device_ahead=True)
        try:
            marks = {p.name: int(p.read_text()) for p in tmp_path.glob("ahead-*")}
            return marks == {"ahead-judge": os.getpid(), "ahead-runner": runner.pid}
        finally:
            runner.close()

    assert _child(prepared) == 0


def test_a_device_that_cannot_be_set_up_ahead_is_left_to_the_job(capfd: pytest.CaptureFixture[str]) -> None:
    """Where the context cannot be created ahead (here: no device, or a forced failure), the worker
    still starts; the job's own device setup repeats the step and reports it as it always did."""
    from rl_kernels.evaluation import worker

    def fails() -> bool:
        if torch.cuda.is_available():
            torch.cuda.init = lambda: (_ for _ in ()).throw(RuntimeError("no device for this test"))
        worker.context_ahead(with_blas=True)
        return True

    assert _child(fails) == 0
    assert "Traceback" in capfd.readouterr().err

