"""Compile pool actor: builds candidates on a CPU, never touching a GPU (DESIGN.md "Data flow").

Thin on purpose: the static gate (`rl_kernels.evaluation.guards`) and the build itself (the
content-addressed cache, ninja, timeouts, `rl_kernels.evaluation.build`) are tested without Ray.
A cache hit returns at once, so re-submitted kernels cost nothing. The returned `Build` carries the artifact bytes; callers pass
the ObjectRef straight to a timer so the artifact moves through the object store, node to node.

If a compiler process dies (OOM-killed compiler, node loss) Ray restarts it (`max_restarts`); the
call that was in flight is retried once by `build_or_fail` (`actors.restarts`), then recorded as
a failed build.
"""

from __future__ import annotations

import ray

from rl_kernels.actors.restarts import WorkLost, call_surviving_restarts
from rl_kernels.config import EvalConfig, SimulationConfig
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.types import Build, Task

COMPILER_FAILED = "compiler_failed"  # reason code: the compile actor died twice on this candidate


@ray.remote(num_cpus=1, concurrency_groups={"control": 1})
class CompilerActor:
    """One compile slot. Create N of them with `.options(max_restarts=...)`; N is a config value.
    `simulate` (`cluster.simulate`) replaces the build by a timed draw (rl_kernels/simulation.py)."""

    def __init__(self, cfg: EvalConfig, simulate: SimulationConfig | None = None) -> None:
        if simulate is not None:
            from rl_kernels.simulation import SimulatedBuilder

            self._build = SimulatedBuilder(simulate).build
        else:
            from rl_kernels.evaluation.build import gated_build   # torch: only for real builds

            self._build = lambda task, source: gated_build(task, source, cfg)

    @ray.method(concurrency_group="control")
    def ready(self) -> bool:
        """Resolves once the constructor ran, even mid-build (own concurrency group): a liveness ping."""
        return True

    def build(self, task: Task, source: str) -> Build:
        """The static gate, then the build: a candidate the gate rejects is never compiled (a module
        candidate's build runs its Python to capture `load_inline` calls)."""
        return self._build(task, source)


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
    async def attempt() -> tuple[ray.ObjectRef, Build]:
        ref = compiler.build.remote(task, source)
        build = await ref
        if build.reason == Reason.COMPILE_INTERRUPTED.value:
            raise WorkLost(f"the build was killed from outside: {build.log[-300:]}")
        return ref, build

    done, retried, last = await call_surviving_restarts(compiler, attempt, retries=retries,
                                                        restart_timeout_s=restart_timeout_s)
    if done is not None:
        return done[0], done[1], retried
    return None, Build(key="", ok=False, log=f"compile actor died during {retried + 1} attempt(s): {last}",
                       reason=COMPILER_FAILED), retried
