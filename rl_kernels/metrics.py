"""The one metrics sink (`MetricsSink`: run_dir/metrics.jsonl plus W&B) and the rollout metrics.

Every number the system reports goes through `MetricsSink.log`, so the local file and W&B always
carry the same keys. `metrics.jsonl` is the record of truth: one JSON line per call, written
before W&B sees anything, readable without W&B (`read_metrics`, `rl-kernels report`).

`group_metrics` turns scored groups into the `rollout/` keys of DESIGN.md "Monitoring". It is a
pure function of the groups, so the numbers can be recomputed later from trajectories.jsonl.
"""

from __future__ import annotations

import json
import math
import netrc
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rl_kernels.archive import passed_every_gate
from rl_kernels.config import MetricsConfig
from rl_kernels.evaluation.reasons import HACK_REASONS
from rl_kernels.evaluation.reward import untrusted_speed
from rl_kernels.trajectories import Group, truncate_torn_tail, read_records

if TYPE_CHECKING:
    import wandb

FILENAME = "metrics.jsonl"
RUN_ID_FILE = "wandb_run_id"   # the W&B run id, so a resumed run continues the same W&B run
_RESERVED = frozenset({"step", "time"})

Value = float | int | str | bool | None


class WandbLoginError(RuntimeError):
    """metrics.wandb_mode is online but no W&B credentials are configured."""


class MetricsSink:
    """Writes each `log` call to run_dir/metrics.jsonl and, when enabled, to a W&B run.

    The file is opened line-buffered, so every record reaches the OS as soon as `log` returns: a
    crash of this process loses nothing that was logged. There is no fsync (unlike
    trajectories.jsonl, which holds training data): a lost machine may lose the last records.

    W&B is on when `cfg.wandb` is true and `cfg.wandb_mode` is not "disabled". Offline runs are
    written under run_dir/wandb (`wandb sync` uploads them later) and make no network calls.
    The run id is kept in run_dir/wandb_run_id so that `resume=True` continues the same W&B run.

    Thread-safe: the driver may log gauges from a timer thread while the main loop logs training.
    """

    def __init__(self, run_dir: Path, cfg: MetricsConfig, *, run_config: dict[str, Any],
                 name: str | None = None, resume: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / FILENAME
        if not resume and self.path.exists() and self.path.stat().st_size > 0:
            raise FileExistsError(f"{self.path} already holds metrics of an earlier run: resume it, or "
                                  "choose another run_dir (a fresh run never mixes with or erases old metrics)")
        use_wandb = cfg.wandb and cfg.wandb_mode != "disabled"
        if use_wandb and cfg.wandb_mode == "online" and not _has_wandb_credentials():
            # Without this check wandb prompts for a key on a terminal and, elsewhere, silently
            # falls back to offline: a run the user believes is online would upload nothing.
            raise WandbLoginError(
                "metrics.wandb_mode is 'online' but no W&B credentials were found: set WANDB_API_KEY "
                "(or run `wandb login`), or set metrics.wandb_mode=offline")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._run: wandb.Run | None = None
        self._wandb_step = 0
        if use_wandb:
            self._run = _start_wandb(self.run_dir, cfg, run_config, name, resume)
            self._wandb_step = self._run.step   # after a W&B resume: one past the last step W&B holds
        truncate_torn_tail(self.path)          # else the next record would be glued to a torn one
        self._file = open(self.path, "a", buffering=1, encoding="utf-8")

    def log(self, values: Mapping[str, Value], *, step: int) -> None:
        """Append `{"step", "time", **values}` to metrics.jsonl; send the numeric values to W&B.

        NaN and infinities are written as null (JSON has no NaN; a line must stay valid JSON for
        every reader); W&B receives them as they are and draws them as gaps.

        W&B only accepts steps that never decrease: a row logged below its current step is dropped
        with a warning. The W&B step is therefore the largest step logged so far, and the caller's
        step is always logged as the value `step` too. A call with a smaller step (a resumed run
        replaying steps, a late component) lands in the newest W&B row with its true `step`
        instead of being dropped. Several calls at one W&B step make one row, and a key logged
        twice there keeps its last value in W&B; metrics.jsonl keeps every call.
        """
        reserved = _RESERVED & values.keys()
        if reserved:
            raise ValueError(f"metric keys {sorted(reserved)} are reserved for the record itself")
        record = {"step": step, "time": time.time(), **{k: _json_value(v) for k, v in values.items()}}
        line = json.dumps(record, allow_nan=False) + "\n"
        with self._lock:
            self._file.write(line)
            if self._run is not None:
                numeric = {k: int(v) if isinstance(v, bool) else v
                           for k, v in values.items() if isinstance(v, (int, float))}
                self._wandb_step = max(self._wandb_step, step)
                self._run.log({**numeric, "step": step}, step=self._wandb_step)

    def close(self, exit_code: int = 0) -> None:
        """Finish the W&B run (a non-zero exit code marks it failed) and close the file; idempotent."""
        with self._lock:
            if self._run is not None:
                self._run.finish(exit_code=exit_code)
                self._run = None
            self._file.close()

    def __enter__(self) -> MetricsSink:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(exit_code=0 if exc_type is None else 1)


def _json_value(value: Value) -> Value:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _start_wandb(run_dir: Path, cfg: MetricsConfig, run_config: dict[str, Any], name: str | None,
                 resume: bool) -> wandb.Run:
    """Start the W&B run (a new one, or with `resume` the one whose id run_dir keeps).

    wandb is imported here, not at module level: it costs ~0.4 s and most processes that import
    this module (actors computing `group_metrics`) never start a run.
    """
    if cfg.wandb_mode == "offline":
        # wandb (0.31) exports its own usage telemetry to its server even for offline runs;
        # offline must mean no network at all. An explicit user setting is kept.
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    import wandb

    id_file = run_dir / RUN_ID_FILE
    run_id = id_file.read_text().strip() if resume and id_file.exists() else None
    run = wandb.init(project=cfg.wandb_project or "rl_kernels", entity=cfg.wandb_entity,
                     mode=cfg.wandb_mode, dir=str(run_dir), config=run_config, name=name, id=run_id,
                     resume="allow" if run_id else None,
                     # the default ("return_previous") would hand a second sink the first one's run
                     reinit="create_new")
    id_file.write_text(run.id + "\n")
    return run


def _has_wandb_credentials() -> bool:
    """Whether wandb will find credentials, checked without contacting the server.

    Looks where wandb does: WANDB_API_KEY, an identity token file, or the `wandb login` entry in
    $NETRC / ~/.netrc for the host of WANDB_BASE_URL (default: wandb's own). Rarer sources (a key
    in wandb's settings file) are not consulted; WANDB_API_KEY is the documented way around.
    """
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    import wandb

    host = urlsplit(os.environ.get("WANDB_BASE_URL") or wandb.Settings().base_url).netloc
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        entry = netrc.netrc(path).authenticators(host)
    except FileNotFoundError:
        return False
    return entry is not None and bool(entry[2])


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of run_dir/metrics.jsonl in order; a torn last line (crash mid-write) is skipped,
    any other unreadable line raises."""
    return list(read_records(Path(run_dir) / FILENAME))




def group_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """The `rollout/` metrics of a batch of scored groups; {} when there is no trajectory.

    Rates are over all trajectories. A trajectory without a measurement (no code could be parsed
    from the completion) counts as neither compiled nor correct, and its rejection is
    `reject_rate/parse/<reason>`, its `detail` being the parser's reason code: a key of its own,
    apart from the evaluator's `malformed`, because it says whether the model learned the answer
    format, not whether its code is valid. Speedup quantiles (linear interpolation) and fast_p are
    over the kernels with a believed speed (`archive.passed_every_gate`), quantiles absent when there
    is none. `zero_variance_groups` is over groups: those
    give GRPO nothing to learn from. `speed_unpaid_rate` counts correct kernels whose speed could
    earn no more than its slowest sample (nor above 1x) because the timing could not be trusted (it never settled, or the
    baseline measured far off its record: a disturbed timer host shows here first).
    """
    trajs = [t for g in groups for t in g.trajectories]
    n = len(trajs)
    if n == 0:
        return {}
    measured = [t.measurement for t in trajs if t.measurement is not None]
    rewards = [t.reward for t in trajs]
    reasons = Counter(m.rejected for m in measured if m.rejected is not None)
    reasons.update(f"parse/{t.detail or 'unknown'}" for t in trajs if t.measurement is None)
    speedups = sorted(m.speedup for m in measured if passed_every_gate(m))
    out = {
        "rollout/trajectories": float(n),
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.pstdev(rewards),
        "rollout/reward_max": max(rewards),
        "rollout/compile_rate": sum(m.compiled for m in measured) / n,
        "rollout/correct_rate": sum(m.correct for m in measured) / n,
        "rollout/hack_rejection_rate": sum(m.rejected in HACK_REASONS for m in measured) / n,
        "rollout/fast_1.0": sum(s > 1.0 for s in speedups) / n,
        "rollout/fast_1.2": sum(s > 1.2 for s in speedups) / n,
        "rollout/zero_variance_groups": sum(g.reward_std() == 0 for g in groups) / len(groups),
        "rollout/truncated_rate": sum(t.truncated for t in trajs) / n,
        "rollout/speed_unpaid_rate": sum(1 for m in measured if m.correct and untrusted_speed(m)) / n,
        "rollout/completion_tokens_mean": statistics.fmean(len(t.token_ids) for t in trajs),
    }
    out.update({f"rollout/reject_rate/{reason}": count / n for reason, count in sorted(reasons.items())})
    if speedups:
        out.update({f"rollout/speedup_p{round(q * 100)}": _quantile(speedups, q) for q in (0.1, 0.5, 0.9)})
        out["rollout/speedup_max"] = speedups[-1]
    return out


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) of a sorted, non-empty list."""
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    frac = pos - lo
    return ordered[lo] + frac * (ordered[lo + 1] - ordered[lo]) if frac else ordered[lo]
