"""`ray job submit`, as the README says to use it, against a real head on loopback: `ray start --head`
with token authentication, the README's runtime_env and exports, `rl-kernels train` as the entry point.

What must hold: a submission without the token (or with a wrong one, or without
`RAY_AUTH_MODE=token` in the submitting shell) is refused; a job with a bad config ends FAILED with
the config error in `ray job logs`; a training job stopped with `ray job stop` after its first
checkpoint leaves a run directory that a second job (`rl-kernels train --resume`) continues from that
checkpoint to the end, publishing the next version.

Cost on the 2-core machine: the head's start (~5 s) and two short training jobs (tiny policy, one
cpu task, the session's build cache) of about a minute each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("ray.dashboard.modules.job.sdk", reason="the jobs CLI needs ray[default]")
from test_rollout_ray import ANSWER, MAX_NEW_TOKENS, TASK  # noqa: E402
from test_train_ray import NO_CODE  # noqa: E402
from tiny_model import save_memorizing_llama  # noqa: E402

from rl_kernels.learner.publish import published_versions  # noqa: E402
from processes import gone  # noqa: E402
from rl_kernels.metrics import read_metrics  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))


def _readme_runtime_env() -> str:
    """The runtime_env JSON of the README's `ray job submit` recipe, verbatim."""
    found = re.search(r"ray job submit .*?--runtime-env-json '([^']+)'", (REPO / "README.md").read_text(), re.S)
    assert found, "the README has no `ray job submit ... --runtime-env-json '...'` recipe"
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Head:
    address: str          # the jobs API, http://127.0.0.1:PORT
    env: dict[str, str]   # a shell as the README sets it up: RAY_AUTH_MODE=token and the token
    token: str
    home: Path            # HOME of the head (its ~/.ray/auth_token), not the user's

    def ray(self, *args: str, env: dict[str, str] | None = None, timeout_s: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([RAY, *args], env=env or self.env, cwd=REPO, capture_output=True, text=True,
                              timeout=timeout_s)

    def submit(self, *entrypoint: str, wait: bool = True, job_id: str | None = None) -> subprocess.CompletedProcess:
        """`ray job submit` exactly as the README writes it."""
        return self.ray("job", "submit", "--address", self.address, "--runtime-env-json", _readme_runtime_env(),
                        *(["--submission-id", job_id] if job_id else []), *([] if wait else ["--no-wait"]),
                        "--", *entrypoint)

    def status(self, job_id: str) -> str:
        """SUCCEEDED, FAILED, STOPPED, PENDING or RUNNING, as `ray job status` prints it."""
        res = self.ray("job", "status", "--address", self.address, job_id)
        out = res.stdout + res.stderr
        for said, status in (("succeeded", "SUCCEEDED"), ("failed", "FAILED"), ("was stopped", "STOPPED")):
            if f"Job '{job_id}' {said}" in out:
                return status
        found = re.search(rf"Status for job '{job_id}': (?:JobStatus\.)?(\w+)", out)
        assert found, out[-1500:]
        return found.group(1)


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    """A Ray head started the way a user starts one with token auth, in its own HOME (the token file
    is written there, not in the user's) and temp dir; its whole process group is ended afterwards."""
    home = Path(tempfile.mkdtemp(prefix="rlk-home-"))
    temp = Path(tempfile.mkdtemp(prefix="rlkray", dir="/tmp"))   # short: Ray's socket paths live under it
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env = dict(base, HOME=str(home), RAY_AUTH_MODE="token", PATH=f"{Path(RAY).parent}{os.pathsep}{base['PATH']}")
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60)
    token = (home / ".ray" / "auth_token").read_text().strip()
    dashboard = _free_port()
    started = subprocess.run(
        [RAY, "start", "--head", f"--port={_free_port()}", f"--dashboard-port={dashboard}", "--dashboard-host=127.0.0.1",
         f"--ray-client-server-port={_free_port()}", "--num-cpus=6", "--num-gpus=0", f"--temp-dir={temp}",
         # Ray's fixed default ports for the node's agents: another Ray on this host (a local
         # `ray.init()` run) holds them, and the head then never gets a job agent.
         *(f"--{flag}={_free_port()}" for flag in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                   "metrics-export-port", "runtime-env-agent-port")),
         "--disable-usage-stats"], env=env, capture_output=True, text=True, timeout=120,
        start_new_session=True)   # the head's processes in a group of their own, ended below
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    gcs = [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p).startswith(str(Path(RAY).parent.parent))
           and "gcs_server" in _cmdline(p) and str(temp) in _cmdline(p)]
    assert len(gcs) == 1, "cannot find the head's gcs_server"
    group = os.getpgid(int(gcs[0].name))
    try:
        ready = Head(f"http://127.0.0.1:{dashboard}", dict(env, RAY_AUTH_TOKEN=token), token, home)
        _wait_for_job_agent(ready)
        yield ready
    finally:
        os.killpg(group, signal.SIGTERM)
        if not gone(int(gcs[0].name), 3):
            os.killpg(group, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _wait_for_job_agent(head: Head, timeout_s: float = 180) -> None:
    """`ray start` returns before the head's job agent has registered; until then a submission is
    refused with "No available agent to submit job, please try again later" (longer on a loaded
    machine). So the fixture submits a job that does nothing until one is taken, and waits for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        res = head.ray("job", "submit", "--address", head.address, "--submission-id", "agent-ready", "--no-wait",
                       "--", "true")
        if res.returncode == 0:
            break
        assert "No available agent" in res.stderr and time.monotonic() < deadline, res.stderr.strip().splitlines()[-1]
        time.sleep(2)
    while head.status("agent-ready") in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the head's first job did not end"
        time.sleep(1)


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_memorizing_llama(tmp_path_factory.mktemp("memorizing"), [ANSWER, NO_CODE])


def _train(run: Path, model: Path, cache: Path, *extra: str) -> list[str]:
    """The embedded default as a 2-core job: a tiny policy, one task, the session's build cache."""
    return ["rl-kernels", "train", "--config", "configs/local.yaml", "cluster.ray_address=auto", f"run_dir={run}",
            f"policy.model={model}", f"policy.max_new_tokens={MAX_NEW_TOKENS}", "policy.group_size=4",
            f"rollout.tasks=[{TASK}]", "rollout.batch_groups=1", "rollout.slot_poll_s=0.1", "prompts.mode=plain",
            "sft.before_train=false", "learner.lr=1e-3", "learner.lora.rank=4", "train.checkpoint_every=1",
            "train.batch_timeout_s=1", "metrics.interval_s=1", "metrics.wandb=false", f"eval.build.cache_dir={cache}",
            "eval.sandbox.timeout_s=120", "eval.timing.warmup=1", f"eval.timing.cpu_cache_bytes={2**20}", *extra]


def test_a_submission_without_the_token_is_refused(head: Head, tmp_path: Path) -> None:
    nobody = {k: v for k, v in head.env.items() if k != "RAY_AUTH_TOKEN"} | {"HOME": str(tmp_path)}
    for env, says in ((nobody, "couldn't find an authentication token"),
                      (dict(nobody, RAY_AUTH_TOKEN="0" * 64), "token is invalid"),
                      ({k: v for k, v in head.env.items() if k != "RAY_AUTH_MODE"}, "RAY_AUTH_MODE is currently")):
        res = head.ray("job", "submit", "--address", head.address, "--", "echo", "ran", env=env, timeout_s=120)
        assert res.returncode != 0 and says in res.stdout + res.stderr, (res.stdout + res.stderr)[-1500:]
        assert "ran" not in res.stdout


def test_a_bad_config_fails_the_job_with_the_error_in_its_logs(head: Head, tmp_path: Path) -> None:
    res = head.submit(*_train(tmp_path / "run", tmp_path, tmp_path, "policy.temprature=0.5"), job_id="bad-config")
    assert res.returncode != 0
    assert head.status("bad-config") == "FAILED"
    logs = head.ray("job", "logs", "--address", head.address, "bad-config").stdout
    assert "policy.temprature: Extra inputs are not permitted" in logs, logs[-1500:]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow   # ~90 s on 2 cores; resume is tested by test_train_ray, submission by this file's other tests
def test_a_stopped_training_job_is_resumed_by_the_next(head: Head, model_dir: Path, cache_dir: Path,
                                                        tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = head.submit(*_train(run, model_dir, cache_dir, "train.max_steps=50"), wait=False, job_id="first")
    assert first.returncode == 0, first.stderr[-1500:]
    deadline = time.monotonic() + 400
    while not (run / "checkpoints" / "step-1").is_dir():
        assert time.monotonic() < deadline, f"no checkpoint within 400 s; job: {head.status('first')}"
        assert head.status("first") in ("PENDING", "RUNNING"), head.ray("job", "logs", "--address", head.address,
                                                                          "first").stdout[-2000:]
        time.sleep(1)
    stopped = head.ray("job", "stop", "--address", head.address, "first")
    assert stopped.returncode == 0, stopped.stderr[-1500:]
    assert head.status("first") == "STOPPED"
    kept = sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir() if p.name.startswith("step-"))
    resume_at = kept[-1]
    second = head.submit("rl-kernels", "train", "--resume", str(run), f"train.max_steps={resume_at + 1}",
                         job_id="second")
    assert second.returncode == 0, (second.stdout + second.stderr)[-2500:]
    assert head.status("second") == "SUCCEEDED"
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["resumed_from"]["step"] == resume_at and summary["steps"] == resume_at + 1
    assert published_versions(run)[-1] == resume_at + 1
    steps = [r["step"] for r in read_metrics(run) if "learner/loss" in r]
    assert steps[-1] == resume_at + 1 and sorted(set(steps)) == list(range(1, resume_at + 2)), steps
