"""VLLMPolicy's logic against a small in-memory engine (the real vLLM runs in tests/gpu).

The engine samples a deterministic pseudo-random token stream per (prompt, seed, adapter); while
`release` is clear its steps make no progress, so tests can hold a generation in flight.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from rl_kernels.host_share import HostShare
from rl_kernels.policy.base import SamplingParams
from rl_kernels.policy.delivery import AdapterDeliveryError
from rl_kernels.policy.vllm_policy import EngineRequest, EngineResult, VLLMPolicy

STOP = 2
VOCAB = 50


class TinyEngine:
    """One token per request per step; token t of a request is a hash of (prompt, seed, adapter, t)."""

    def __init__(self, *, lists_adapters: bool = True, fail_step: bool = False) -> None:
        self.lists_adapters, self.fail_step = lists_adapters, fail_step
        self.running: dict[str, tuple[EngineRequest, list[int]]] = {}
        self.adapters: dict[int, Path] = {}
        self.log: list[tuple[str, int]] = []
        self.steps = 0
        self.release = threading.Event()
        self.release.set()

    def stop_token_ids(self) -> list[int]:
        return [STOP]

    def add_request(self, request: EngineRequest) -> None:
        if request.version and request.version not in self.adapters:
            raise KeyError(f"engine has no adapter {request.version}")
        self.running[request.request_id] = (request, [])

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self) -> list[EngineResult]:
        if not self.release.is_set():   # a generation in progress: the step makes no visible progress
            time.sleep(0.001)
            return []
        if self.fail_step:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        self.steps += 1
        done = []
        for rid, (req, tokens) in list(self.running.items()):
            if req.prompt_logprobs:
                del self.running[rid]
                done.append(EngineResult(rid, [7], [-0.5], "length",
                                         [-0.1 * (i + 1) - req.version for i in range(len(req.prompt_token_ids) - 1)]))
                continue
            tokens.append(self._token(req, len(tokens)))
            if tokens[-1] == STOP or len(tokens) == req.params.max_new_tokens:
                del self.running[rid]
                reason = "stop" if tokens[-1] == STOP else "length"
                done.append(EngineResult(rid, tokens, [-1.0 - t / 100 for t in tokens], reason))
        return done

    def _token(self, req: EngineRequest, t: int) -> int:
        h = hashlib.sha256(f"{req.prompt_token_ids}/{req.seed}/{req.version}/{t}".encode()).digest()
        return h[0] % VOCAB

    def add_adapter(self, version: int, path: Path) -> None:
        self.log.append(("add", version))
        if self.lists_adapters:
            self.adapters[version] = path

    def remove_adapter(self, version: int) -> None:
        self.log.append(("remove", version))
        del self.adapters[version]

    def listed_adapters(self) -> set[int]:
        return set(self.adapters)


def _policy(engine: TinyEngine, max_loaded: int = 2, host: HostShare | None = None) -> VLLMPolicy:
    return VLLMPolicy(engine, encode=lambda messages: [1] + [ord(c) % VOCAB for c in messages[-1]["content"]],
                      decode=lambda ids: " ".join(map(str, ids)), max_loaded_adapters=max_loaded, host=host)


def _adapter(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "adapter_config.json").write_text("{}")
    return d


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_completions_are_records_the_learner_can_train_on() -> None:
    engine = TinyEngine()
    policy = _policy(engine)
    params = SamplingParams(max_new_tokens=12, n=4, seed=5)
    groups = policy.generate([_chat("add two vectors"), _chat("softmax")], params, 0)
    assert [len(g) for g in groups] == [4, 4]
    for g, text in zip(groups, ["add two vectors", "softmax"]):
        for c in g:
            assert c.prompt_token_ids == [1] + [ord(ch) % VOCAB for ch in text]
            assert len(c.logprobs) == len(c.token_ids) and c.adapter_version == 0
            assert c.text == " ".join(map(str, c.token_ids))
            if c.finish_reason == "stop":
                assert c.token_ids[-1] == STOP and not c.truncated        # the stop token is kept
            else:
                assert len(c.token_ids) == 12 and c.truncated and STOP not in c.token_ids
    assert len({tuple(c.token_ids) for c in groups[0]}) == 4              # rows differ: seed + k each
    again = policy.generate([_chat("add two vectors"), _chat("softmax")], params, 0)
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in groups]
    policy.close()


def test_an_unloaded_version_is_refused_with_the_loaded_ones(tmp_path: Path) -> None:
    policy = _policy(TinyEngine())
    with pytest.raises(KeyError, match=r"version 3 \(policy-v3\) is not loaded; loaded versions: \[0\]"):
        policy.generate([_chat("x")], SamplingParams(max_new_tokens=4), 3)
    with pytest.raises(FileNotFoundError, match="adapter_config.json missing"):
        policy.load_adapter(1, tmp_path)
    with pytest.raises(ValueError, match="start at 1"):
        policy.load_adapter(0, _adapter(tmp_path, "a"))
    policy.close()


def test_an_adapter_the_engine_does_not_list_fails_the_load(tmp_path: Path) -> None:
    """The engine accepted the load and serves nothing: the load must not look like success."""
    policy = _policy(TinyEngine(lists_adapters=False))
    with pytest.raises(AdapterDeliveryError, match=r"does not list policy-v1 .* \(it lists \[\]\)"):
        policy.load_adapter(1, _adapter(tmp_path, "v1"))
    assert policy.loaded_versions() == [0]
    policy.close()


def test_versions_are_evicted_least_recently_used_never_while_in_flight(tmp_path: Path) -> None:
    engine = TinyEngine()
    policy = _policy(engine, max_loaded=2)
    for v in (1, 2):
        policy.load_adapter(v, _adapter(tmp_path, f"v{v}"))
    params = SamplingParams(max_new_tokens=30, seed=1)
    engine.release.clear()                     # hold v1's generation in flight
    out: list = []
    t = threading.Thread(target=lambda: out.append(policy.generate([_chat("long")], params, 1)))
    t.start()
    _wait(lambda: engine.running)
    policy.load_adapter(3, _adapter(tmp_path, "v3"))   # loads while v1 samples; 2 is the LRU one
    assert policy.loaded_versions() == [0, 1, 3]
    policy.load_adapter(4, _adapter(tmp_path, "v4"))   # 1 is the LRU one but in flight: it stays for now
    assert policy.loaded_versions() == [0, 1, 3, 4]
    engine.release.set()
    t.join(10)
    assert out and out[0][0][0].adapter_version == 1
    _wait(lambda: policy.loaded_versions() == [0, 3, 4])   # evicted once its request finished
    assert ("remove", 1) in engine.log and ("remove", 2) in engine.log
    policy.close()


def test_a_republished_version_replaces_the_old_adapter(tmp_path: Path) -> None:
    engine = TinyEngine()
    policy = _policy(engine)
    first, second = _adapter(tmp_path, "a"), _adapter(tmp_path, "b")
    policy.load_adapter(1, first)
    policy.load_adapter(1, first)            # the same announcement again: nothing reloads
    policy.load_adapter(1, second)           # a resumed run trained v1 again
    assert engine.log == [("add", 1), ("remove", 1), ("add", 1)] and engine.adapters[1] == second
    policy.close()


def test_score_returns_the_prompt_logprobs_of_the_version(tmp_path: Path) -> None:
    policy = _policy(TinyEngine())
    policy.load_adapter(1, _adapter(tmp_path, "v1"))
    assert policy.score([5, 6, 7, 8], 1) == pytest.approx([-1.1, -1.2, -1.3])
    with pytest.raises(ValueError, match="at least two tokens"):
        policy.score([5], 1)
    policy.close()


def test_an_engine_error_reaches_every_waiting_caller() -> None:
    policy = _policy(TinyEngine(fail_step=True))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        policy.generate([_chat("x")], SamplingParams(max_new_tokens=4, n=2), 0)
    with pytest.raises(RuntimeError, match="engine loop is closed") as later:   # and nothing runs on it again
        policy.generate([_chat("x")], SamplingParams(max_new_tokens=4), 0)
    assert "illegal memory access" in str(later.value.__cause__)


def test_a_timer_holding_the_host_stops_engine_steps(tmp_path: Path) -> None:
    """With a host share, each engine step is one unit of shared use: while a timer holds the host
    (GPU) alone, no step runs."""
    engine = TinyEngine()
    host = HostShare(tmp_path / "host.lock")
    policy = _policy(engine, host=host)
    out: list = []
    with host.exclusive():
        t = threading.Thread(target=lambda: out.append(policy.generate([_chat("x")], SamplingParams(max_new_tokens=8), 0)))
        t.start()
        time.sleep(0.5)
        assert engine.steps == 0 and not out
    t.join(10)
    assert out and engine.steps >= 1
    policy.close()


def _wait(predicate, timeout: float = 10.0):   # noqa: ANN001, ANN202 - test helper
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")
