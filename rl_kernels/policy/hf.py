"""The transformers backend: `generate` on CPU or one GPU, LoRA adapters through PEFT.

It is the reference backend (every test and the 2-core local default use it); the vLLM backend
must produce the same Completion records.  Behaviour logprobs come from the very scores
`generate` sampled from, so they are exact for the sampling distribution, not recomputed.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import torch
from peft import PeftModel
from transformers import AutoTokenizer, GenerationConfig, StoppingCriteria, StoppingCriteriaList

from rl_kernels.host_share import HostShare, SharedUse
from rl_kernels.policy.base import BASE_VERSION, Completion, Messages, SamplingParams, adapter_name
from rl_kernels.policy.delivery import next_token_logprobs
from rl_kernels.policy.models import encode_chat, load_causal_lm, resolve_model, stop_token_ids


class HFPolicy:
    """A PolicyBackend over a transformers causal LM.

    Versions: 0 is the base model; k >= 1 is the PEFT adapter loaded as `policy-v{k}`.  At most
    `max_loaded_adapters` adapters stay loaded (set it to max_staleness + 2, so requests still
    in flight on older versions find their weights); the least recently used one goes first.

    A new version loads while a generation is running (weight sync must not wait for a
    generation that takes minutes on a CPU): PEFT adds an adapter without activating it, so the
    running generation keeps its weights.  Two locks: `_sampling` admits one generation at a time
    and is held for its whole length; `_lock` is held briefly for every change of model state
    (activating a version, injecting or deleting an adapter, the bookkeeping), so those never
    interleave.  The version in use is never evicted (its eviction waits for the generation's
    end), and the very first adapter, which wraps the base model's modules, waits for the
    generation like before.
    """

    def __init__(
        self,
        model_path: str | Path,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        max_loaded_adapters: int = 4,
        batch_size: int = 8,
        init_adapter: Path | None = None,
        host: HostShare | None = None,
    ) -> None:
        if max_loaded_adapters < 1:
            raise ValueError(f"max_loaded_adapters must be >= 1, got {max_loaded_adapters}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = torch.device(device)
        self.host = host   # with a host share, generation yields to timers between tokens
        if dtype is None:
            dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        path = resolve_model(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        base = load_causal_lm(path, dtype, init_adapter).to(self.device).eval()
        self._stop_ids = stop_token_ids(self.tokenizer.eos_token_id, base.generation_config)
        pad = self.tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else self._stop_ids[0]
        # Drop the checkpoint's sampling defaults (top_k, top_p, repetition penalty...):
        # SamplingParams is the only source, or behaviour logprobs would not match the policy.
        base.generation_config = GenerationConfig(
            eos_token_id=self._stop_ids, pad_token_id=self._pad_id
        )
        self._base = base
        self._model: torch.nn.Module = base
        self._adapters: OrderedDict[int, Path] = OrderedDict()  # version -> its files, LRU order, most recent last
        self._max_adapters = max_loaded_adapters
        self._batch_size = batch_size
        self._lock = threading.RLock()
        self._sampling = threading.Lock()
        self._in_use: int | None = None   # the version the running generation samples from

    def loaded_versions(self) -> list[int]:
        with self._lock:
            return [BASE_VERSION, *sorted(self._adapters)]

    def load_adapter(self, version: int, path: Path) -> None:
        """Load `path` as `policy-v{version}`. Loading a version again from the same path only
        refreshes its recency (so a retried announcement is harmless); from another path it
        replaces the version's weights (a version re-published after a resume, the delivery
        check's magnified copy), after the generation sampling from it, if any, has ended."""
        if version <= BASE_VERSION:
            raise ValueError(f"adapter versions start at 1 (0 is the base model), got {version}")
        path = Path(path)
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"no PEFT adapter at {path} (adapter_config.json missing)")
        with self._lock:
            known = self._adapters.get(version)
            if known == path:
                self._adapters.move_to_end(version)
                return
            if isinstance(self._model, PeftModel) and (known is None or version != self._in_use):
                self._replace(version, path)
                return
        # Wrapping the base model's modules, or replacing the version being sampled: no generation may run.
        with self._sampling, self._lock:
            if self._adapters.get(version) != path:
                self._replace(version, path)

    def _replace(self, version: int, path: Path) -> None:
        """Caller holds `_lock`: the version's adapter, if loaded, deleted; `path` added under its name."""
        if version in self._adapters:
            self._delete(version)
        self._add(version, path)

    def _delete(self, version: int) -> None:
        """Caller holds `_lock`."""
        del self._adapters[version]
        self._model.delete_adapter(adapter_name(version))

    def _add(self, version: int, path: Path) -> None:
        """Caller holds `_lock`.  An adapter added to a PeftModel is injected inactive, so a
        generation running now keeps sampling from its own version.  Its tensors are created
        empty (`low_cpu_mem_usage`) and filled from the file: initialising them would draw from
        torch's global RNG, which a seeded generation running now is sampling from."""
        name = adapter_name(version)
        if isinstance(self._model, PeftModel):
            self._model.load_adapter(str(path), adapter_name=name, low_cpu_mem_usage=True)
        else:
            self._model = PeftModel.from_pretrained(self._base, str(path), adapter_name=name)
        self._model.eval()
        self._adapters[version] = path
        self._evict_excess()

    def _evict_excess(self) -> None:
        """Delete least recently used adapters beyond the limit.  The one in use is not deleted:
        its eviction waits for the generation's end, which calls this again.  Caller holds `_lock`."""
        while len(self._adapters) > self._max_adapters:
            oldest = next(iter(self._adapters))
            if oldest == self._in_use:
                return
            self._delete(oldest)

    def generate(
        self, prompts: list[Messages], params: SamplingParams, adapter_version: int
    ) -> list[list[Completion]]:
        """Sample params.n completions per prompt; rows (prompt x n) go through in batches of
        `batch_size`.  With params.seed set, the same call gives the same completions."""
        prompt_ids = [self._encode(messages) for messages in prompts]
        rows = [ids for ids in prompt_ids for _ in range(params.n)]
        seed = params.seed if params.seed is not None else random.randrange(2**63)
        with self._sampling, contextlib.ExitStack() as active:
            with self._lock:
                self._require_loaded(adapter_version)
                if adapter_version != BASE_VERSION:
                    self._adapters.move_to_end(adapter_version)
                active.enter_context(self._adapter(adapter_version))
                self._in_use = adapter_version
            try:
                with self._seeded(seed), torch.inference_mode(), SharedUse(self.host) as use:
                    flat = [
                        completion
                        for start in range(0, len(rows), self._batch_size)
                        for completion in self._sample(
                            rows[start : start + self._batch_size], params, adapter_version, use
                        )
                    ]
            finally:
                with self._lock:
                    active.close()   # leave the adapter context under the lock too
                    self._in_use = None
                    self._evict_excess()
        return [flat[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def score(self, token_ids: list[int], adapter_version: int) -> list[float]:
        """Raw (temperature 1) logprob of every token after the first under `adapter_version`:
        one forward, holding the generation lock because it switches the active adapter."""
        if len(token_ids) < 2:
            raise ValueError("score needs at least two tokens (the first has no logprob)")
        with self._sampling, contextlib.ExitStack() as active:
            with self._lock:
                self._require_loaded(adapter_version)
                active.enter_context(self._adapter(adapter_version))
            ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)    # [1, L]
            with torch.inference_mode():
                logprobs = next_token_logprobs(self._model(input_ids=ids).logits[0], ids[0])
            with self._lock:
                active.close()
        return logprobs

    def _encode(self, messages: Messages) -> list[int]:
        """The chat template owns special tokens (BOS, role markers), so none are added again."""
        return encode_chat(self.tokenizer, messages)

    def _require_loaded(self, version: int) -> None:
        if version != BASE_VERSION and version not in self._adapters:
            raise KeyError(
                f"adapter version {version} ({adapter_name(version)}) is not loaded; "
                f"loaded versions: {self.loaded_versions()}"
            )

    @contextlib.contextmanager
    def _adapter(self, version: int) -> Iterator[None]:
        """Version 0 runs with adapters disabled; others activate their named adapter."""
        if not isinstance(self._model, PeftModel):
            yield
        elif version == BASE_VERSION:
            with self._model.disable_adapter():
                yield
        else:
            self._model.set_adapter(adapter_name(version))
            yield

    @contextlib.contextmanager
    def _seeded(self, seed: int) -> Iterator[None]:
        """`generate` samples from torch's global RNG (it takes no torch.Generator), so seed it
        inside a fork that restores the caller's RNG state afterwards."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=self.device.type):
            torch.manual_seed(seed)
            yield

    def _sample(
        self, rows: list[list[int]], params: SamplingParams, version: int, use: SharedUse
    ) -> list[Completion]:
        """One left-padded batch through `generate`.  Each sampled token's logprob is taken from its
        step's processed scores as soon as it is sampled, and those scores are freed: memory holds
        rows x vocab floats of them, not rows x new tokens x vocab (0.9 GB for 4 x 1200 tokens of
        SmolLM2's vocabulary).  After every token a waiting timer gets the host (`use`)."""
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            attention_mask[i, width - len(r) :] = 1
        recorder = _SampledLogprobs()
        out = self._model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            do_sample=True,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,  # explicit: transformers' default top_k is 50, 0 disables it
            max_new_tokens=params.max_new_tokens,
            return_dict_in_generate=True,
            output_scores=True,   # hands each step's scores to the criteria, which free them
            stopping_criteria=StoppingCriteriaList([_YieldBetweenTokens(use), recorder]),
        )
        new_tokens = out.sequences[:, width:].cpu()
        logprobs = torch.stack(recorder.logprobs, dim=1)   # [rows, new tokens]
        if logprobs.shape != new_tokens.shape:
            raise RuntimeError(f"generate sampled {tuple(new_tokens.shape)} tokens but reported scores for "
                               f"{tuple(logprobs.shape)}: the behaviour logprobs would not match the tokens")
        return [
            self._completion(r, new_tokens[i].tolist(), logprobs[i].tolist(), version)
            for i, r in enumerate(rows)
        ]

    def _completion(
        self,
        prompt: list[int],
        tokens: list[int],
        logprobs: list[float],
        version: int,
    ) -> Completion:
        """Cut at the first stop token (kept, it was sampled); without one the answer ran into
        max_new_tokens and is truncated."""
        stop_at = next((j for j, tok in enumerate(tokens) if tok in self._stop_ids), None)
        if stop_at is None:
            n = len(tokens)  # == max_new_tokens: a batch ends early only once every row stopped
            finish, truncated = "length", True
        else:
            n = stop_at + 1
            finish, truncated = "stop", False
        return Completion(
            text=self.tokenizer.decode(tokens[:n], skip_special_tokens=True),
            prompt_token_ids=list(prompt),
            token_ids=tokens[:n],
            logprobs=logprobs[:n],
            adapter_version=version,
            finish_reason=finish,
            truncated=truncated,
        )


class _SampledLogprobs(StoppingCriteria):
    """Called by `generate` after every token with the scores kept so far (`output_scores`): the
    logprob of the token each row just sampled, from that step's processed scores (temperature,
    top-k and top-p applied, as the sampler drew from them), which it then frees. Never stops a row."""

    def __init__(self) -> None:
        self.logprobs: list[torch.Tensor] = []   # per step [rows], on the CPU

    def __call__(self, input_ids: torch.LongTensor, scores: tuple[torch.FloatTensor, ...] | None, **kwargs: object
                 ) -> torch.BoolTensor:
        if not scores:
            raise RuntimeError("generate passed no scores to its stopping criteria (output_scores is needed)")
        step = scores[-1]                                                           # [rows, V]
        self.logprobs.append(torch.log_softmax(step.float(), dim=-1).gather(-1, input_ids[:, -1:])[:, 0].cpu())
        step.set_()   # generate keeps the tuple to the end; the step's [rows, V] floats are not read again
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class _YieldBetweenTokens(StoppingCriteria):
    """Called by `generate` after every token: never stops a row, only lets a timer in."""

    def __init__(self, use: SharedUse) -> None:
        self.use = use

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None, **kwargs: object
                 ) -> torch.BoolTensor:
        self.use.between()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
