"""The job's status line: what a user reads while no group or step has finished for a while."""

from __future__ import annotations

from rl_kernels.cluster.status import Console, GroupProgress, status_line


def test_the_line_names_each_group_in_flight_with_its_phase_and_age() -> None:
    groups = [GroupProgress("builtin/softmax", 1, started=100.0, phase="measuring", kernels=3, measured=2),
              GroupProgress("builtin/rmsnorm", 2, started=158.0)]
    line = status_line(250.0, groups, None, {"generate": 0, "compile": 1, "time": 2}, done=5, step=2, version=2,
                       now=340.0)
    assert line == ("status 4m10s: 2 groups in flight: builtin/softmax v1 measuring 2/3 kernels 4m00s; "
                    "builtin/rmsnorm v2 sampling 3m02s | queues: generate 0, compile 1, time 2 | 5 groups done, "
                    "step 2, policy v2")


def test_without_groups_it_says_what_the_job_waits_for() -> None:
    queues = {"generate": 0, "compile": 0, "time": 0}
    seeding = status_line(40.0, [], "measuring the seed kernels of 3 task(s)", queues, 0, 0, 0, now=40.0)
    assert seeding.startswith("status 40s: measuring the seed kernels of 3 task(s) |") and "0 groups done" in seeding
    idle = status_line(4000.0, [], None, queues, 1, 7, 7, now=4000.0)
    assert "status 1h06m: no group in flight (waiting for a slot" in idle and "1 group done, step 7" in idle


def test_many_groups_show_the_three_oldest() -> None:
    groups = [GroupProgress(f"builtin/t{i}", 0, started=float(i)) for i in range(5)]
    line = status_line(10.0, groups, None, {}, 0, 0, 0, now=10.0)
    assert "builtin/t0" in line and "builtin/t2" in line and "builtin/t3" not in line and "(+2 more)" in line


def test_the_console_remembers_its_last_line(capsys) -> None:   # noqa: ANN001
    now = [0.0]
    console = Console(clock=lambda: now[0])
    now[0] = 12.5
    assert console.quiet_for() == 12.5
    console.say("group g000001 ...")
    assert console.quiet_for() == 0.0 and capsys.readouterr().out == "group g000001 ...\n"
    silent = Console(enabled=False, clock=lambda: now[0])
    silent.say("not shown")
    assert capsys.readouterr().out == ""
