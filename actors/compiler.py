"""Compile pool actor: builds candidates on a CPU, never touching a GPU (DESIGN.md "Data flow").

Thin on purpose: the static gate (`rl_kernels.evaluation.guards`) and the build itself (the
content-addressed cache, ninja, timeouts, `rl_kernels.evaluation.build`) are tested without Ray. A cache hit returns at once,
so re-submitted kernels cost nothing. The returned `Build` carries the artifact bytes; callers pass
the ObjectRef straight to a timer so the artifact moves through the object store, node to node.

If a compiler process dies (OOM-killed compiler, node loss) Ray restarts it (`max_restarts`); the
call that was in flight is retried once by `build_or_fail`, then recorded as a failed build.
"""

from __future__ import annotations

import asyncio
import time

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from rl_kernels.config import EvalConfig
from rl_kernels.evaluation.build import build_candidate
from rl_kernels.evaluation.guards import static_check
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.types import Build, Task

COMPILER_FAILED = "compiler_failed"  # reason code: the compile actor died twice on this candidate


@ray.remote(num_cpus=1, concurrency_groups={"control": 1})
class CompilerActor:
    """One compile slot. Create N of them with `.options(max_restarts=...)`; N is a config value."""

    def __init__(self, cfg: EvalConfig) -> None:
        self.cfg = cfg

    @ray.method(concurrency_group="control")
    def ready(self) -> bool:
        """Resolves once the constructor ran, even mid-build (own concurrency group): a liveness ping."""
        return True

    def build(self, task: Task, source: str) -> Build:
        """The static gate, then the build: a candidate the gate rejects is never compiled (a module
        candidate's build runs its Python to capture `load_inline` calls)."""
        allow = task.allow_torch_ops or self.cfg.allow_torch_rewrites
        verdict = static_check(task, source, self.cfg.backend, allow_torch_ops=allow)
        if verdict.reason is not None:
            return Build(key="", ok=False, log=verdict.detail, reason=verdict.reason.value)
        return build_candidate(task, source, self.cfg.backend, self.cfg.build)


async def build_or_fail(compiler: ray.actor.ActorHandle, task: Task, source: str, *,
                        retries: int = 1, restart_timeout_s: float = 120.0
                        ) -> tuple[ray.ObjectRef | None, Build, int]:
    """Build on `compiler`, retrying up to `retries` times if the actor dies mid-call.

    Returns (ref, build, retries_used). Pass `ref` (not `build`) to the timer so the artifact goes
    through the object store instead of being re-uploaded by the caller; `build` is there so the
    caller can see `ok` / `reason`. `ref` is None when every attempt died: then `build` is a failed
    Build with reason "compiler_failed". A candidate is never lost and never counted twice. An
    exception raised by the build code itself is a bug and propagates; only actor death (or a build
    whose compiler died with the actor: `compile_interrupted`) is retried.
    """
    last = ""
    tried = 0
    for attempt in range(retries + 1):
        if attempt and not await wait_until_restarted(compiler, restart_timeout_s):
            break  # dead for good (restarts used up) or not back in time: a retry cannot run
        tried += 1
        ref = compiler.build.remote(task, source)
        try:
            build = await ref
        except RayActorError as exc:
            last = str(exc)
            continue
        if build.reason != Reason.COMPILE_INTERRUPTED.value:
            return ref, build, attempt
        last = f"the build was killed from outside: {build.log[-300:]}"
    return None, Build(key="", ok=False, log=f"compile actor died during {tried} attempt(s): {last}",
                       reason=COMPILER_FAILED), tried - 1


async def wait_until_restarted(actor: ray.actor.ActorHandle, timeout_s: float, *,
                               ping_s: float = 5.0, dead_grace_s: float = 5.0) -> bool:
    """After an actor died mid-call: True once Ray has restarted it, False if it is dead for good.

    A retry sent while Ray is still restarting the actor fails at once (ActorUnavailableError)
    without running, which would waste the one retry a candidate gets; so wait for the actor
    first. It is alive when `ready()` answers (the actors serve it in a "control" concurrency
    group, so it does not queue behind work); a ping that only times out is also taken as alive,
    since only a restarting actor refuses calls outright. Right after a death, a ping can still
    reach the old process and fail with ActorDiedError although a restart is coming, so the actor
    counts as dead for good only when ActorDiedError persists for `dead_grace_s`.
    """
    deadline = time.monotonic() + timeout_s
    died_since: float | None = None
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(_ping(actor), ping_s)
            return True
        except asyncio.TimeoutError:
            return True
        except ActorUnavailableError:
            died_since = None
        except ActorDiedError:
            died_since = died_since or time.monotonic()
            if time.monotonic() - died_since >= dead_grace_s:
                return False
        await asyncio.sleep(0.25)
    return False


async def _ping(actor: ray.actor.ActorHandle) -> None:
    await actor.ready.remote()
