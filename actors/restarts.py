"""Calls that survive their actor's death: Ray restarts the actor, the caller tries once more.

Every actor call that carries work (a build, an evaluation, a generation) goes through
`call_surviving_restarts`, so the rule is written once: Ray never re-runs a call itself
(`max_task_retries=0`); after the actor died mid-call the caller waits until Ray has restarted it
and sends the call again, up to `retries` times, and then gives the work up, which the caller
records as failed. Each piece of work is thus retried a counted number of times, never lost and
never done twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

T = TypeVar("T")
log = logging.getLogger(__name__)


class WorkLost(RuntimeError):
    """Raised by an attempt whose work was lost although the call itself returned (a build whose
    compiler process was killed from outside): retried like an actor death."""


async def call_surviving_restarts(actor: ray.actor.ActorHandle, attempt: Callable[[], Awaitable[T]], *,
                                  retries: int, restart_timeout_s: float) -> tuple[T | None, int, str]:
    """Run `attempt()` (one call on `actor`); after the actor died mid-call (or the attempt raised
    WorkLost), wait for Ray to restart it and run it again, up to `retries` more times.

    Returns (result, retries used, last error); result is None when every attempt was lost or the
    actor did not come back. Any other exception is a bug and propagates.
    """
    last = ""
    tried = 0
    for n in range(retries + 1):
        if n and not await wait_until_restarted(actor, restart_timeout_s):
            break  # dead for good (restarts used up) or not back in time: a retry cannot run
        tried += 1
        try:
            return await attempt(), n, ""
        except (RayActorError, WorkLost) as exc:
            last = str(exc)
            # Said now, not only when the work is given up: a retry that succeeds doubles the call's
            # time, and the cause (Ray's memory monitor, a crash) is only in this exception.
            log.warning("%s lost its call (attempt %d of %d): %s", _name(actor), n + 1, retries + 1,
                        " ".join(last.split())[:400])
    return None, tried - 1, last


def _name(actor: ray.actor.ActorHandle) -> str:
    """The actor's class and id, as a user finds them in `ray list actors`."""
    cls = getattr(getattr(actor, "_ray_actor_creation_function_descriptor", None), "class_name", "actor")
    return f"{cls} {actor._actor_id.hex()[:12]}"


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
