"""Adapter delivery, checked: the version a generator samples from is the learner's adapter.

Async RL systems have trained for whole runs while their inference engines never received a LoRA
update (the engine listed no adapters; it looked like staleness). Listing is not enough either: a
wrong file, a target module the engine ignores or a scaling mismatch serve *an* adapter, not the
learner's. So the learner writes a probe next to every adapter it publishes: a fixed token sequence
with its own per-token logprobs under the new adapter and under the base. Before a generator samples
from a version for the first time it scores the same tokens under that version and under the base,
and asks how much of the learner's adapter *effect* (adapter minus base, per token) it reproduces:

    learner effect e_l = learner_adapter - learner_base,  served effect e_s = served_adapter - served_base
    share = sum(e_s * e_l) / sum(e_l ** 2)      (least squares: e_s ~ share * e_l)
    delivered  <=>  |share - 1| <= policy.delivery_tolerance

A generator serving the base under the version's name has share 0, one applying half the scaling
0.5, the learner's adapter 1. Per-token numerics (a bf16 engine and a learner differ by ~0.04
nats/token on SmolLM2, as much as a fresh adapter moves the probe) are not correlated with the
adapter's effect, so they average out of `share` instead of adding up as they would in a mean
absolute difference; numerics on the learner's side (a bf16 learner) do bias it toward 0, so the
correlation of the two effects is reported beside it.

A small effect cannot be judged as it is. A bf16 model cannot represent a weight change far below
its 2^-8 resolution: the first steps from a zero-initialised LoRA B move the probe by rounding noise
(0.049 nats/token after one step on an H100, vLLM against a bf16 learner: share -0.08, correlation
-0.07; a bf16 hf generator against the same learner code read 0.47 with a base gap of 0). So the
learner magnifies it: when its adapter moves the probe by less than `policy.delivery_magnify_to`
nats/token, it also scores the probe with every LoRA layer's scaling multiplied by m (4, 16, 64, ...
up to the first m that moves it that far; the update B @ A * alpha / r is linear in the scaling) and
writes m and those logprobs into the probe. The generator then judges the magnified copy: it loads
the published files once more under the version's number with `lora_alpha` times m in their
adapter_config.json (the same tensors), scores the probe, loads the published adapter back, checks
that the version scores the probe as before the swap (so the magnified copy cannot stay in
service), and asks the question above of the magnified effects. That tests what the plain check
would (the files, the target modules, the scaling, the engine's loading path) with an effect the
numerics cannot fake. The copy goes under the version's own number on purpose: under a number of its
own it would test the loading path but not what the version's number serves (a stale adapter kept
under a re-published number would pass).

Whichever effect is judged, the check is conclusive only when it is at least
`policy.delivery_min_shift` and `policy.delivery_noise_multiple` times the base gap (mean |served
base - learner base| on the probe); otherwise (an update that is zero, or below what m = 4^12
reveals; a probe written with magnification off) the version is served and counted as inconclusive.
An adapter without a probe (made outside the learner) is served and counted as unchecked.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rl_kernels.policy.base import BASE_VERSION, Completion, Messages, PolicyBackend, SamplingParams, adapter_name

PROBE_FILE = "probe.json"

MAGNIFICATION_STEP = 4.0
"""The learner tries magnifications 4, 16, 64, ... of the adapter's scaling until the probe's effect
is large enough."""
MAX_MAGNIFICATION = MAGNIFICATION_STEP ** 12
"""About 1.7e7: Adam's first steps from a zero LoRA B move it by about the learning rate (1e-5 to
1e-3), so a larger factor would only magnify an adapter that has not been trained."""
RESTORED_FRACTION = 0.1
"""After the magnified check the version's probe scores must be back within this fraction of the
magnified shift: the published adapter, not the magnified copy, is what the version then serves."""

PROBE_MESSAGES: Messages = [
    {"role": "user", "content": "Write a CUDA kernel that adds two float vectors of length n."},
    {"role": "assistant", "content": (
        "### Performance analysis\nThe add is memory-bound: one load per input and one store per output.\n"
        "### Algorithm design\nOne thread per element, grid-stride loop, coalesced accesses.\n### Code\n```cuda\n"
        "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
        "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
        "    c[i] = a[i] + b[i];\n}\n```")},
]
"""A short exchange in the policy's answer format: the probe's tokens, in the distribution it samples."""


class AdapterDeliveryError(RuntimeError):
    """A generator serves something other than the learner's adapter for a version."""


@dataclass(frozen=True)
class Probe:
    """What the learner measured on its own model when it published a version."""

    token_ids: list[int]           # [L] the probe sequence
    adapter_logprobs: list[float]  # [L-1] log p(token_ids[i] | prefix), i >= 1, adapter on, temperature 1
    base_logprobs: list[float]     # [L-1] the same with the adapter off
    magnification: float = 1.0     # the factor on the adapter's LoRA scaling behind magnified_logprobs
    magnified_logprobs: list[float] | None = None   # [L-1] under the magnified adapter; None: not needed

    def __post_init__(self) -> None:
        n = len(self.token_ids) - 1
        if n < 1 or len(self.adapter_logprobs) != n or len(self.base_logprobs) != n:
            raise ValueError(f"a probe of {len(self.token_ids)} tokens needs {n} logprobs per model, got "
                             f"{len(self.adapter_logprobs)} and {len(self.base_logprobs)}")
        if self.magnified_logprobs is not None and (len(self.magnified_logprobs) != n or self.magnification <= 1):
            raise ValueError(f"a magnified probe needs {n} logprobs and a magnification above 1, got "
                             f"{len(self.magnified_logprobs)} at {self.magnification}")

    @property
    def shift(self) -> float:
        """Mean |adapter - base| logprob on the probe (nats per token): the adapter's own effect."""
        return mean_abs_gap(self.adapter_logprobs, self.base_logprobs)

    def magnified(self) -> Probe | None:
        """The probe of the magnified adapter (its logprobs as the adapter's), when there is one."""
        if self.magnified_logprobs is None:
            return None
        return Probe(self.token_ids, self.magnified_logprobs, self.base_logprobs)


@dataclass(frozen=True)
class DeliveryCheck:
    """One version's check on one generator."""

    version: int
    share: float      # the part of the learner's effect the generator reproduces (1: all of it)
    correlation: float  # of the two effects over the probe's tokens: 1 same direction, ~0 unrelated
    shift: float      # mean |learner's effect|, nats per token
    tolerance: float  # the largest |share - 1| that counts as delivered
    min_shift: float  # below it the check cannot tell the adapter from the base
    base_gap: float = 0.0         # mean |served base - learner base| on the probe: the engines' numerics
    noise_multiple: float = 0.0   # the effect must be this many base gaps to decide
    magnification: float = 1.0    # the factor on the adapter's scaling in this check (1: as published)

    @property
    def conclusive(self) -> bool:
        return self.shift >= max(self.min_shift, self.noise_multiple * self.base_gap)

    @property
    def delivered(self) -> bool:
        return not self.conclusive or abs(self.share - 1.0) <= self.tolerance


def probe_token_ids(tokenizer: Any) -> list[int]:
    """The probe sequence for a tokenizer (its chat template, as the policy's prompts use)."""
    text = tokenizer.apply_chat_template(PROBE_MESSAGES, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def next_token_logprobs(logits: Any, ids: Any, temperature: float = 1.0) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1 from one sequence's logits [L, V] and its ids [L]: the one
    convention the learner's probe and every generator's score share."""
    import torch

    logp = torch.log_softmax(logits[:-1].float() / temperature, dim=-1)   # [L-1, V]
    return logp.gather(-1, ids[1:, None])[:, 0].cpu().tolist()           # [L-1]


def write_magnified_adapter(source: Path, factor: float, target: Path) -> Path:
    """A PEFT adapter directory at `target` whose update is `factor` times `source`'s: the same
    tensor files (linked), `lora_alpha` and every `alpha_pattern` entry multiplied by `factor`. LoRA
    scales B @ A by alpha / r (or alpha / sqrt(r)), so every engine applies `factor` times the update."""
    source, target = Path(source), Path(target)
    config = json.loads((source / "adapter_config.json").read_text())
    if "lora_alpha" not in config:
        raise AdapterDeliveryError(f"{source}/adapter_config.json has no lora_alpha: not a LoRA adapter")
    config["lora_alpha"] = config["lora_alpha"] * factor
    config["alpha_pattern"] = {k: v * factor for k, v in (config.get("alpha_pattern") or {}).items()}
    target.mkdir(parents=True)
    for item in source.iterdir():
        if item.name not in ("adapter_config.json", PROBE_FILE):
            os.symlink(item.resolve(), target / item.name)
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return target


def write_probe(directory: Path, probe: Probe) -> None:
    (Path(directory) / PROBE_FILE).write_text(json.dumps(asdict(probe)))


def read_probe(directory: Path) -> Probe | None:
    """The probe published with an adapter; None when it has none. A probe that cannot be read is an
    error: the adapter directory is damaged."""
    path = Path(directory) / PROBE_FILE
    if not path.is_file():
        return None
    try:
        return Probe(**json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise AdapterDeliveryError(f"{path} is not a readable probe: {exc}") from exc


def compare(version: int, probe: Probe, served: list[float], served_base: list[float], tolerance: float,
            min_shift: float, noise_multiple: float = 0.0, magnification: float = 1.0) -> DeliveryCheck:
    """The check's numbers from the generator's logprobs of the probe under the version (`served`)
    and under the base (`served_base`); raises nothing (see `DeliveryCheckedPolicy`)."""
    n = len(probe.adapter_logprobs)
    if len(served) != n or len(served_base) != n:
        raise AdapterDeliveryError(f"{adapter_name(version)}: the generator scored {len(served)} probe tokens, "
                                   f"the learner {n} (different tokenizers?)")
    learner = [a - b for a, b in zip(probe.adapter_logprobs, probe.base_logprobs)]   # [n]
    generator = [s - b for s, b in zip(served, served_base)]                        # [n]
    energy = sum(x * x for x in learner)
    share = sum(g * x for g, x in zip(generator, learner)) / energy if energy > 0 else float("nan")
    base_gap = mean_abs_gap(served_base, probe.base_logprobs)
    return DeliveryCheck(version, share, _correlation(generator, learner), probe.shift, tolerance, min_shift,
                         base_gap, noise_multiple, magnification)


def mean_abs_gap(a: list[float], b: list[float]) -> float:
    """Mean |a - b| over two per-token logprob lists of one length (nats per token)."""
    return sum(abs(x - y) for x, y in zip(a, b)) / len(b)


def _correlation(a: list[float], b: list[float]) -> float:
    """Pearson's r; nan when either side is constant (an engine serving the base has no effect)."""
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    va, vb = sum((x - ma) ** 2 for x in a), sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return float("nan")
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (va * vb) ** 0.5


class DeliveryCheckedPolicy:
    """A PolicyBackend that checks each version's probe before its first generation.

    Wraps any backend: `load_adapter` remembers where the version came from, the first `generate` on
    it scores the probe and raises AdapterDeliveryError (with the version and the share) when the
    share is out of tolerance. A version loaded again (announced again after a resume, re-published
    under its number, reloaded by a restarted generator) is checked again."""

    def __init__(self, backend: PolicyBackend, tolerance: float, min_shift: float, noise_multiple: float = 0.0) -> None:
        self.backend, self.tolerance, self.min_shift = backend, tolerance, min_shift
        self.noise_multiple = noise_multiple
        self._lock = threading.Lock()       # the books below
        self._checking = threading.Lock()   # one check at a time
        self._pending: dict[int, Path] = {}     # loaded, not yet checked
        self.checks: list[DeliveryCheck] = []
        self.counts = {"adapter_checks": 0, "adapter_check_failures": 0, "adapter_inconclusive": 0,
                       "adapter_unchecked": 0, "adapter_magnified": 0}

    def load_adapter(self, version: int, path: Path) -> None:
        # Pending before the backend has it: a generation that arrives while the load runs (another
        # concurrency group of the actor) must not find the version loaded and unchecked.
        with self._lock:
            self._pending[version] = Path(path)
        self.backend.load_adapter(version, path)

    def loaded_versions(self) -> list[int]:
        return self.backend.loaded_versions()

    def score(self, token_ids: list[int], adapter_version: int) -> list[float]:
        return self.backend.score(token_ids, adapter_version)

    def generate(self, prompts: list[Messages], params: SamplingParams, adapter_version: int
                 ) -> list[list[Completion]]:
        # A version stays pending until a check passes, so a generation that arrives while another
        # one checks it waits for the verdict instead of sampling an unchecked version.
        if adapter_version in self._pending:
            with self._checking:
                with self._lock:
                    path = self._pending.get(adapter_version)
                if path is not None:
                    self._check(adapter_version, path)
                    with self._lock:
                        if self._pending.get(adapter_version) == path:
                            del self._pending[adapter_version]
        return self.backend.generate(prompts, params, adapter_version)

    def stats(self) -> dict[str, float]:
        """Counts, the last conclusive check's share and correlation, the share farthest from 1 so far,
        the last check's base gap (the engines' numerics, which decide what is conclusive)."""
        conclusive = [c for c in self.checks if c.conclusive]
        return {**self.counts, "adapter_share_last": conclusive[-1].share if conclusive else float("nan"),
                "adapter_base_gap_last": self.checks[-1].base_gap if self.checks else float("nan"),
                "adapter_share_worst": max((c.share for c in conclusive), key=lambda x: abs(x - 1.0), default=float("nan")),
                "adapter_correlation_last": conclusive[-1].correlation if conclusive else float("nan")}

    def _check(self, version: int, path: Path) -> None:
        probe = read_probe(path)
        if probe is None:
            self.counts["adapter_unchecked"] += 1
            return
        served = self.backend.score(probe.token_ids, version)
        served_base = self.backend.score(probe.token_ids, BASE_VERSION)
        magnified = probe.magnified()
        if magnified is None:
            check = compare(version, probe, served, served_base, self.tolerance, self.min_shift, self.noise_multiple)
        else:   # the learner found the plain effect too small to judge reliably
            served_magnified = self._score_magnified(version, path, probe.magnification, probe.token_ids, served)
            check = compare(version, magnified, served_magnified, served_base, self.tolerance, self.min_shift,
                            self.noise_multiple, probe.magnification)
        self.checks.append(check)
        self.counts["adapter_checks"] += 1
        if check.magnification != 1:
            self.counts["adapter_magnified"] += 1
        if not check.conclusive:
            self.counts["adapter_inconclusive"] += 1
        if not check.delivered:
            self.counts["adapter_check_failures"] += 1   # still pending: a retry checks again
            raise AdapterDeliveryError(
                f"{adapter_name(version)} from {path} is not what the learner published: on the probe the generator "
                f"reproduces {check.share:.2f} of the learner's adapter effect ({check.shift:.4f} nats/token"
                + (f" with the adapter magnified {check.magnification:g}x" if check.magnification != 1 else "") + ", "
                f"correlation {check.correlation:.2f}, engines' base gap {check.base_gap:.4f}; delivered means 1 +- "
                f"{check.tolerance})"
                + (" -- the generator serves the base model?" if abs(check.share) < check.tolerance else ""))

    def _score_magnified(self, version: int, path: Path, factor: float, token_ids: list[int],
                         served: list[float]) -> list[float]:
        """The probe's logprobs with the version's files magnified `factor` times, served under the
        version's own number (so through its loading path); the published adapter is loaded back and
        must score the probe as it did before (`served`)."""
        with tempfile.TemporaryDirectory(prefix=f"{adapter_name(version)}-magnified-") as tmp:
            magnified = write_magnified_adapter(path, factor, Path(tmp) / "adapter")
            self.backend.load_adapter(version, magnified)
            try:
                scores = self.backend.score(token_ids, version)
            finally:
                self.backend.load_adapter(version, path)
        after, moved = mean_abs_gap(self.backend.score(token_ids, version), served), mean_abs_gap(scores, served)
        if after > RESTORED_FRACTION * moved:
            raise AdapterDeliveryError(
                f"{adapter_name(version)}: after its magnified check the generator does not serve {path} again (the "
                f"probe moved {after:.4f} nats/token from its first scores, the magnified copy {moved:.4f})")
        return scores
