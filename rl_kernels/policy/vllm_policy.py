"""The vLLM backend's logic: requests in, Completion records out, adapters as versions.

vLLM itself is behind `Engine` (rl_kernels/policy/vllm_engine.py wraps the real one), so what
this module decides is tested without a GPU:

- One request per sampled row (prompt x n): row k of a seeded call gets seed + k, so its rows differ
  and a repeated call repeats their random draws (its tokens only up to bf16 numerics, which
  prefix-cache hits and batch composition change); the engine's prefix cache shares the prompt.
- One engine loop thread owns the engine: every `step()` runs there, and `generate`, `score` and
  adapter changes from other threads are queued to it and applied between steps. So an adapter loads
  while a generation runs (the engine batches requests of different versions together), and with a
  host share every step is one unit of shared use: a timer measuring on the same GPU holds it alone
  between two steps (in-process engine, so no step runs while the loop waits).
- Versions: 0 is the base model, k >= 1 the adapter `policy-v{k}` (vLLM's LoRA id k). At most
  `max_loaded_adapters` stay loaded, the least recently used goes first, never one with requests in
  flight. After every load the engine must list the version, or the load fails loudly.
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rl_kernels.host_share import HostShare, SharedUse
from rl_kernels.policy.base import BASE_VERSION, Completion, FinishReason, Messages, SamplingParams, adapter_name
from rl_kernels.policy.delivery import AdapterDeliveryError


@dataclass(frozen=True)
class EngineRequest:
    """One sequence for the engine: sample `max_tokens` after the prompt (n = 1), or with
    `prompt_logprobs` score the prompt itself and sample one token."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    seed: int | None
    version: int
    prompt_logprobs: bool = False


@dataclass(frozen=True)
class EngineResult:
    """A finished request. `logprobs[i]` is the sampled token i's logprob under the distribution it
    was sampled from (temperature and top-k/top-p applied); `prompt_logprobs[i]` the raw logprob of
    prompt token i + 1 (scoring requests only)."""

    request_id: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_logprobs: list[float] = field(default_factory=list)


class Engine(Protocol):
    """The part of a vLLM engine the backend drives (all calls from the engine loop thread)."""

    def add_request(self, request: EngineRequest) -> None: ...
    def step(self) -> list[EngineResult]:
        """One scheduling step; returns the requests that finished in it."""
        ...
    def has_unfinished_requests(self) -> bool: ...
    def add_adapter(self, version: int, path: Path) -> None: ...
    def remove_adapter(self, version: int) -> None: ...
    def listed_adapters(self) -> set[int]: ...
    def stop_token_ids(self) -> list[int]: ...


_Command = tuple[Callable[[], Any], Future[Any]]   # run on the loop thread, its result into the future


class VLLMPolicy:
    """A PolicyBackend over an `Engine`; `encode` turns chat messages into prompt token ids and
    `decode` completion tokens into text (the model's tokenizer and chat template, as the hf
    backend and the learner use)."""

    def __init__(self, engine: Engine, *, encode: Callable[[Messages], list[int]],
                 decode: Callable[[list[int]], str], max_loaded_adapters: int,
                 host: HostShare | None = None) -> None:
        if max_loaded_adapters < 1:
            raise ValueError(f"max_loaded_adapters must be >= 1, got {max_loaded_adapters}")
        self.engine, self.encode, self.decode = engine, encode, decode
        self._stop_ids = set(engine.stop_token_ids())
        self._max_adapters = max_loaded_adapters
        self._host = host
        self._adapters: OrderedDict[int, Path] = OrderedDict()   # LRU order, most recent last
        self._in_flight: dict[int, int] = {}                     # version -> requests not finished
        self._commands: queue.Queue[_Command | None] = queue.Queue()   # None closes the loop
        self._waiting: dict[str, tuple[Future[EngineResult], int]] = {}
        self._ids = itertools.count()
        self._closed = False
        self._error: BaseException | None = None   # the engine's failure, once it failed
        self._loop = threading.Thread(target=self._run, name="vllm-engine-loop", daemon=True)
        self._loop.start()

    # ---- PolicyBackend ------------------------------------------------------------------------
    def loaded_versions(self) -> list[int]:
        return self._call(lambda: [BASE_VERSION, *sorted(self._adapters)])

    def load_adapter(self, version: int, path: Path) -> None:
        """Load `path` as `policy-v{version}` between two engine steps; loading a version already
        present only refreshes its recency."""
        if version <= BASE_VERSION:
            raise ValueError(f"adapter versions start at 1 (0 is the base model), got {version}")
        path = Path(path)
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"no PEFT adapter at {path} (adapter_config.json missing)")
        self._call(lambda: self._load(version, path))

    def generate(self, prompts: list[Messages], params: SamplingParams, adapter_version: int
                 ) -> list[list[Completion]]:
        """params.n completions per prompt, all sampled with `adapter_version`."""
        prompt_ids = [self.encode(messages) for messages in prompts]
        seed = params.seed if params.seed is not None else random.randrange(2**62)
        requests = [EngineRequest(f"g{next(self._ids)}", ids, params, seed + k, adapter_version)
                    for k, ids in enumerate(ids for ids in prompt_ids for _ in range(params.n))]
        results = [f.result() for f in self._submit(requests)]
        flat = [self._completion(r, res, adapter_version) for r, res in zip(requests, results)]
        return [flat[i * params.n:(i + 1) * params.n] for i in range(len(prompts))]

    def score(self, token_ids: list[int], adapter_version: int) -> list[float]:
        if len(token_ids) < 2:
            raise ValueError("score needs at least two tokens (the first has no logprob)")
        request = EngineRequest(f"s{next(self._ids)}", list(token_ids), SamplingParams(max_new_tokens=1), 0,
                                adapter_version, prompt_logprobs=True)
        result = self._submit([request])[0].result()
        if len(result.prompt_logprobs) != len(token_ids) - 1:
            raise RuntimeError(f"the engine scored {len(result.prompt_logprobs)} of {len(token_ids) - 1} tokens")
        return result.prompt_logprobs

    def close(self) -> None:
        """Stop the loop thread (requests still queued fail)."""
        self._commands.put(None)
        self._loop.join()

    # ---- engine loop --------------------------------------------------------------------------
    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the loop thread between steps and return its result (or raise its error)."""
        done: Future[Any] = Future()
        self._commands.put((fn, done))
        if self._closed:   # the loop may have closed before it saw this command
            self._refuse_queued()
        return done.result()

    def _submit(self, requests: list[EngineRequest]) -> list[Future[EngineResult]]:
        futures: list[Future[EngineResult]] = [Future() for _ in requests]

        def add() -> None:
            for r, f in zip(requests, futures):
                try:
                    self._require_loaded(r.version)
                    self.engine.add_request(r)
                except BaseException as exc:   # noqa: BLE001 - handed to the caller
                    f.set_exception(exc)
                    continue
                self._waiting[r.request_id] = (f, r.version)
                self._in_flight[r.version] = self._in_flight.get(r.version, 0) + 1
                if r.version in self._adapters:
                    self._adapters.move_to_end(r.version)
        self._call(add)
        return futures

    def _run(self) -> None:
        """Idle: wait for a command, holding nothing. Busy: step the engine until no request is
        left, running queued commands between steps."""
        while self._run_command(self._commands.get()) and self._drive():
            pass
        self._closed = True
        self._fail_waiting(self._error or RuntimeError("the vLLM engine loop was closed"))
        self._refuse_queued()

    def _run_command(self, command: _Command | None) -> bool:
        """Run one queued command; False for the close marker."""
        if command is None:
            return False
        fn, done = command
        try:
            done.set_result(fn())
        except BaseException as exc:   # noqa: BLE001 - handed to the caller
            done.set_exception(exc)
        return True

    def _drive(self) -> bool:
        """Step while requests are unfinished, as units of the host's shared use (a timer waiting for
        the host goes before the next step); False when a close command came or a step failed."""
        with SharedUse(self._host) as use:
            while self.engine.has_unfinished_requests():
                while not self._commands.empty():
                    if not self._run_command(self._commands.get_nowait()):
                        return False
                use.between()
                try:
                    finished = self.engine.step()
                except BaseException as exc:   # noqa: BLE001 - every caller, waiting or later, gets it
                    self._error = exc
                    return False   # an engine that failed a step is not trusted again
                for result in finished:
                    self._finish(result)
        return True

    def _refuse_queued(self) -> None:
        """Fail every command still queued: the loop is closed."""
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command is not None:
                exc = RuntimeError("the vLLM engine loop is closed")
                exc.__cause__ = self._error
                command[1].set_exception(exc)

    def _finish(self, result: EngineResult) -> None:
        future, version = self._waiting.pop(result.request_id)
        self._in_flight[version] -= 1
        if not self._in_flight[version]:
            del self._in_flight[version]
        future.set_result(result)
        self._evict_excess()

    def _fail_waiting(self, exc: BaseException) -> None:
        waiting, self._waiting = self._waiting, {}
        self._in_flight.clear()
        for future, _ in waiting.values():
            future.set_exception(exc)

    # ---- adapters (loop thread only) ----------------------------------------------------------
    def _load(self, version: int, path: Path) -> None:
        if version in self._adapters and self._adapters[version] == path:
            self._adapters.move_to_end(version)
            return
        if version in self._adapters:   # re-published under the same number (after a resume)
            self.engine.remove_adapter(version)
            del self._adapters[version]
        self.engine.add_adapter(version, path)
        listed = self.engine.listed_adapters()
        if version not in listed:
            raise AdapterDeliveryError(f"the vLLM engine does not list {adapter_name(version)} after loading "
                                       f"{path} (it lists {sorted(listed)})")
        self._adapters[version] = path
        self._evict_excess()

    def _evict_excess(self) -> None:
        """Least recently used first; one with requests in flight stays until they finish (then this
        runs again), so for a while more than the limit may be loaded."""
        while len(self._adapters) > self._max_adapters:
            oldest = next(iter(self._adapters))
            if oldest in self._in_flight:
                return
            del self._adapters[oldest]
            self.engine.remove_adapter(oldest)

    def _require_loaded(self, version: int) -> None:
        if version != BASE_VERSION and version not in self._adapters:
            raise KeyError(f"adapter version {version} ({adapter_name(version)}) is not loaded; "
                           f"loaded versions: {[BASE_VERSION, *sorted(self._adapters)]}")

    # ---- records ------------------------------------------------------------------------------
    def _completion(self, request: EngineRequest, result: EngineResult, version: int) -> Completion:
        """The engine keeps the stop token it sampled (its logprob is trained, as with hf)."""
        if result.finish_reason == "stop" and (not result.token_ids or result.token_ids[-1] not in self._stop_ids):
            raise RuntimeError(f"request {request.request_id} stopped on token "
                               f"{result.token_ids[-1:] or 'none'}, not one of the stop tokens {sorted(self._stop_ids)}")
        if len(result.logprobs) != len(result.token_ids):
            raise RuntimeError(f"request {request.request_id}: {len(result.token_ids)} tokens but "
                               f"{len(result.logprobs)} logprobs")
        return Completion(text=self.decode(result.token_ids), prompt_token_ids=list(request.prompt_token_ids),
                          token_ids=list(result.token_ids), logprobs=list(result.logprobs),
                          adapter_version=version, finish_reason=result.finish_reason,
                          truncated=result.finish_reason == "length")
