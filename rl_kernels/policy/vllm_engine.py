"""The real vLLM engine behind `VLLMPolicy` (the optional extra `rl-kernels[vllm]`, vLLM >= 0.26).

Settings that make vLLM's records the ones GRPO needs:
- `logprobs_mode="processed_logprobs"`: behaviour logprobs after temperature and top-k/top-p, i.e.
  of the distribution each token was sampled from (vLLM's default is the raw model's).
- `generation_config="vllm"`: the checkpoint's sampling defaults are ignored; our SamplingParams
  are the only source, as in the hf backend.
- The stop tokens are the hf backend's (tokenizer EOS plus the checkpoint's), passed explicitly.
- LoRA on, `max_loras` = the adapters kept resident (max_staleness + 2), rank limit from config.
- In-process engine core when a timer shares this host or GPU (`host`): then nothing runs on the
  GPU between two `step()` calls, and the loop thread's pauses are real. Without one, vLLM's
  engine-core process overlaps scheduling with the GPU.
- Tensor parallelism (`policy.vllm.tensor_parallel_size` > 1) runs vLLM's workers as processes of
  this actor on the GPUs of its placement bundle; only one-GPU engines have run here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rl_kernels.config import PolicyConfig
from rl_kernels.host_share import HostShare
from rl_kernels.policy.base import adapter_name
from rl_kernels.policy.models import encode_chat, merged_model_dir, model_stop_token_ids, resolve_model
from rl_kernels.policy.vllm_policy import EngineRequest, EngineResult, VLLMPolicy


class VLLMEngine:
    """`Engine` over vllm.v1's LLMEngine."""

    def __init__(self, model_dir: Path, cfg: PolicyConfig, *, max_loras: int, in_process: bool) -> None:
        if in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"   # read when the engine is built
        try:
            from vllm import EngineArgs
            from vllm.v1.engine.llm_engine import LLMEngine
        except ImportError as exc:
            raise ImportError("policy.backend=vllm needs vLLM: pip install 'rl-kernels[vllm]' (vLLM >= 0.26)") from exc

        v = cfg.vllm
        dtype = {"auto": "bfloat16"}.get(cfg.dtype, cfg.dtype)
        args = EngineArgs(model=str(model_dir), dtype=dtype, seed=0, enable_lora=True, max_loras=max_loras,
                          max_lora_rank=v.max_lora_rank, gpu_memory_utilization=v.gpu_memory_utilization,
                          max_model_len=v.max_model_len, max_num_seqs=v.max_num_seqs,
                          tensor_parallel_size=v.tensor_parallel_size, enforce_eager=v.enforce_eager,
                          logprobs_mode="processed_logprobs", generation_config="vllm",
                          # Inside a generator actor vLLM sees the graph's placement group and would run its
                          # tensor-parallel workers as Ray actors on bundles that belong to other actors; its own
                          # processes use exactly the GPUs Ray gave this actor.
                          distributed_executor_backend="mp" if v.tensor_parallel_size > 1 else None,
                          **({"attention_backend": v.attention_backend} if v.attention_backend else {}))
        self.engine = LLMEngine.from_engine_args(args, enable_multiprocessing=not in_process)
        self._stop = model_stop_token_ids(model_dir)
        self._loras: dict[int, Any] = {}

    def stop_token_ids(self) -> list[int]:
        return list(self._stop)

    def add_request(self, request: EngineRequest) -> None:
        from vllm import SamplingParams

        p = request.params
        if request.prompt_logprobs:
            params = SamplingParams(n=1, temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        else:
            params = SamplingParams(n=1, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k,
                                    max_tokens=p.max_new_tokens, seed=request.seed, logprobs=0,
                                    stop_token_ids=self._stop, detokenize=False)
        self.engine.add_request(request.request_id, {"prompt_token_ids": list(request.prompt_token_ids)}, params,
                                lora_request=self._loras.get(request.version))

    def step(self) -> list[EngineResult]:
        return [_result(out) for out in self.engine.step() if out.finished]

    def has_unfinished_requests(self) -> bool:
        return self.engine.has_unfinished_requests()

    def add_adapter(self, version: int, path: Path) -> None:
        from vllm.lora.request import LoRARequest

        request = LoRARequest(adapter_name(version), version, str(path))
        self.engine.add_lora(request)
        self._loras[version] = request

    def remove_adapter(self, version: int) -> None:
        self.engine.remove_lora(version)
        self._loras.pop(version, None)

    def listed_adapters(self) -> set[int]:
        return set(self.engine.list_loras())


def _result(out: Any) -> EngineResult:
    """A finished RequestOutput as our record: the sampled tokens' own logprobs, the prompt's."""
    sample = out.outputs[0]
    tokens = list(sample.token_ids)
    logprobs = [sample.logprobs[i][t].logprob for i, t in enumerate(tokens)] if sample.logprobs else []
    prompt = list(out.prompt_token_ids or [])
    prompt_logprobs = ([out.prompt_logprobs[i][t].logprob for i, t in enumerate(prompt) if i > 0]
                       if out.prompt_logprobs else [])
    if sample.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM request {out.request_id} ended with {sample.finish_reason!r}")
    return EngineResult(out.request_id, tokens, logprobs, sample.finish_reason, prompt_logprobs)


def build_vllm_policy(cfg: PolicyConfig, *, max_loaded_adapters: int, host: HostShare | None) -> VLLMPolicy:
    """The configured model (with `policy.init_adapter` merged into a cached copy: vLLM serves a
    directory) behind a vLLM engine."""
    from transformers import AutoTokenizer

    model_dir = resolve_model(cfg.model)
    if cfg.init_adapter is not None:
        model_dir = merged_model_dir(model_dir, cfg.init_adapter)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = VLLMEngine(model_dir, cfg, max_loras=max_loaded_adapters, in_process=host is not None)
    return VLLMPolicy(engine, encode=lambda messages: encode_chat(tokenizer, messages),
                      decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                      max_loaded_adapters=max_loaded_adapters, host=host)
