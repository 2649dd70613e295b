"""vLLM against the hf backend on one GPU: tokens/s, adapter hot-load, delivery check, train/inference
mismatch. Prints a table; with --out writes the figures as JSON.

    python benchmarks/vllm_generation.py --out vllm.json [--model SmolLM2-135M-Instruct] [--groups 16]
        [--hf-groups 0] [--engine-dtype float32]

Same prompts for both (the built-in cuda tasks' plain prompts), groups of 8 completions, 640 new
tokens at most, temperature 1, with a LoRA adapter (r16 on every linear layer, as the learner's
default) loaded as version 1. The "learner" here is a PEFT model in this process: the probe and the
recomputed logprobs come from it, in bf16 (the learner's dtype on a GPU) and fp32.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import torch  # noqa: E402

from rl_kernels.config import PolicyConfig, VLLMSettings  # noqa: E402
from rl_kernels.heldout import heldout_prompt  # noqa: E402
from rl_kernels.policy.base import Completion, SamplingParams  # noqa: E402
from rl_kernels.policy.delivery import Probe, compare, probe_token_ids  # noqa: E402
from rl_kernels.policy.models import resolve_model  # noqa: E402
from rl_kernels.tasks.suites import load_suite  # noqa: E402
from tiny_model import PeftScorer, save_learner_like_lora  # noqa: E402


def tokens_per_s(run: Any) -> tuple[float, int, float]:
    t0 = time.monotonic()
    groups = run()
    wall = time.monotonic() - t0
    n = sum(len(c.token_ids) for g in groups for c in g)
    return n / wall, n, wall


def concurrent(policy: Any, prompts: list[Any], params: SamplingParams, version: int, groups: int) -> list[list[Completion]]:
    """`groups` generate calls at once, as a generator with that many slots takes them."""
    out: list[list[Completion]] = []
    lock = threading.Lock()

    def one(k: int) -> None:
        g = policy.generate([prompts[k % len(prompts)]], params, version)
        with lock:
            out.extend(g)
    threads = [threading.Thread(target=one, args=(k,)) for k in range(groups)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def mismatch(learner: PeftScorer, completions: list[Completion], temperature: float) -> dict[str, float]:
    """Behaviour (vLLM) vs recomputed (learner) logprobs of the sampled tokens."""
    diffs, log_w = [], []
    for c in completions:
        recomputed = learner.logprobs(c.prompt_token_ids + c.token_ids, temperature)[len(c.prompt_token_ids) - 1:]
        d = [b - r for b, r in zip(c.logprobs, recomputed)]
        diffs.extend(d)
        log_w.append(-sum(d))   # sequence importance weight log(pi_learner / pi_behaviour)
    kl = statistics.fmean(math.exp(-x) - 1 + x for x in diffs)     # k3 estimator of KL(behaviour || learner)
    return {"mean_abs_logprob_diff": statistics.fmean(abs(x) for x in diffs), "kl_k3_per_token": kl,
            "seq_is_weight_median": statistics.median(math.exp(x) for x in log_w),
            "seq_is_weight_min": min(math.exp(x) for x in log_w), "seq_is_weight_max": max(math.exp(x) for x in log_w),
            "tokens": len(diffs)}


def effect_shares(policy: Any, learner: PeftScorer, completions: list[Completion]) -> dict[str, float]:
    """The delivery check's share (rl_kernels/policy/delivery.py) on sampled tokens instead of the
    probe, with the engine's adapter logprobs taken two ways: from generation (the behaviour
    logprobs; temperature 1, nothing truncated, so they are the raw ones) and from scoring the same
    tokens as a prompt; the engine's base logprobs come from scoring (no adapter involved)."""
    learner_effect: list[float] = []
    served: dict[str, list[float]] = {"generation_path": [], "prompt_path": []}
    for c in completions:
        ids, start = c.prompt_token_ids + c.token_ids, len(c.prompt_token_ids) - 1
        learner_effect += [a - b for a, b in zip(learner.logprobs(ids)[start:], learner.logprobs(ids, adapter=False)[start:])]
        base = policy.score(ids, 0)[start:]
        for path, logprobs in (("generation_path", c.logprobs), ("prompt_path", policy.score(ids, 1)[start:])):
            served[path] += [s - b for s, b in zip(logprobs, base)]
    probe = Probe([0] * (len(learner_effect) + 1), learner_effect, [0.0] * len(learner_effect))
    out: dict[str, Any] = {"tokens": len(learner_effect)}
    for path, effect in served.items():
        check = compare(1, probe, effect, [0.0] * len(effect), 0.5, 0.0)
        out[path] = check.share
        out[path + "_correlation"] = check.correlation
    return out


def hf_rate(model_dir: Path, adapter: Path, prompts: list[Any], params: SamplingParams, groups: int) -> dict[str, float]:
    """The hf backend's tokens/s on `groups` groups, one batch of 8 each, adapter v1 active."""
    from rl_kernels.policy.hf import HFPolicy

    hf = HFPolicy(model_dir, device="cuda", dtype=torch.bfloat16, batch_size=8)
    hf.load_adapter(1, adapter)
    hf.generate([prompts[0]], SamplingParams(max_new_tokens=16, n=8, seed=1), 1)   # warm-up
    rates = [tokens_per_s(lambda k=k: hf.generate([prompts[k % len(prompts)]], params, 1)) for k in range(groups)]
    tokens, wall = sum(r[1] for r in rates), sum(r[2] for r in rates)
    return {"tokens_per_s": tokens / wall, "tokens": tokens, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--groups", type=int, default=16, help="concurrent groups for vLLM's throughput figure")
    ap.add_argument("--hf-groups", type=int, default=1, help="groups sampled with hf (one batch of 8 each)")
    ap.add_argument("--max-new-tokens", type=int, default=640)
    ap.add_argument("--lora-std", type=float, default=0.01, help="std of the adapter's B matrices")
    ap.add_argument("--eager", action="store_true", help="vLLM without CUDA graphs / torch.compile")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    ap.add_argument("--engine-dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="vLLM's weights and activations (float32 tells numerics from a different adapter)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from rl_kernels.policy.vllm_engine import build_vllm_policy

    model_dir = resolve_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    adapters = [save_learner_like_lora(model_dir, work / f"v{k}", seed=k, std=args.lora_std) for k in (1, 2, 3, 4, 5)]
    zeroed = work / "zeroed"
    shutil.copytree(adapters[0], zeroed)
    from safetensors.torch import load_file, save_file

    w = load_file(zeroed / "adapter_model.safetensors")
    save_file({k: v * 0 if "lora_B" in k else v for k, v in w.items()}, zeroed / "adapter_model.safetensors")
    from transformers import AutoTokenizer

    probe_ids = probe_token_ids(AutoTokenizer.from_pretrained(model_dir))
    learners = {"bf16": PeftScorer(model_dir, adapters[0], torch.bfloat16),
                "fp32": PeftScorer(model_dir, adapters[0], torch.float32)}
    tasks = {t.id: t for t in load_suite("builtin")}
    prompts = [heldout_prompt(tasks[f"builtin/{n}"], "cuda") for n in ("scale_bias_relu", "softmax", "rmsnorm", "layernorm")]
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, n=8, seed=0)
    res: dict[str, Any] = {"model": str(model_dir), "gpu": torch.cuda.get_device_name(), "max_new_tokens": args.max_new_tokens,
                           "prompts": len(prompts), "lora_std": args.lora_std, "eager": args.eager}

    if args.hf_groups:
        res["hf"] = hf_rate(model_dir, adapters[0], prompts, params, args.hf_groups)
        print(f"hf: {res['hf']['tokens_per_s']:.0f} tokens/s ({res['hf']['tokens']} tokens in {res['hf']['wall_s']:.1f} s)",
              flush=True)
        torch.cuda.empty_cache()

    # ---- vLLM --------------------------------------------------------------------------------------
    cfg = PolicyConfig(backend="vllm", device="cuda", model=str(model_dir), dtype=args.engine_dtype,
                       vllm=VLLMSettings(gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=args.eager,
                                         max_model_len=2048, attention_backend="FLASH_ATTN"))
    t0 = time.monotonic()
    policy = build_vllm_policy(cfg, max_loaded_adapters=3, host=None)
    res["vllm_engine_start_s"] = time.monotonic() - t0
    print(f"vllm engine up in {res['vllm_engine_start_s']:.1f} s", flush=True)
    loads = []
    for k, path in enumerate(adapters, start=1):
        t0 = time.monotonic()
        policy.load_adapter(k, path)
        loads.append(time.monotonic() - t0)
    res["adapter_load_s"] = loads
    res["loaded_after_5"] = policy.loaded_versions()
    policy.load_adapter(1, adapters[0])   # evicted as the least recently used: loads again
    policy.generate([prompts[0]], SamplingParams(max_new_tokens=16, n=8, seed=1), 1)   # warm-up
    one = tokens_per_s(lambda: policy.generate([prompts[0]], params, 1))
    res["vllm_one_group"] = {"tokens_per_s": one[0], "tokens": one[1], "wall_s": one[2]}
    many = tokens_per_s(lambda: concurrent(policy, prompts, params, 1, args.groups))
    res["vllm_concurrent"] = {"groups": args.groups, "tokens_per_s": many[0], "tokens": many[1], "wall_s": many[2]}
    hf_rate_s = res["hf"]["tokens_per_s"] if "hf" in res else float("nan")
    res["speedup_one_group"] = one[0] / hf_rate_s
    res["speedup_concurrent"] = many[0] / hf_rate_s
    print(f"vllm: one group {one[0]:.0f} tokens/s, {args.groups} groups {many[0]:.0f} tokens/s", flush=True)

    # ---- delivery and mismatch ---------------------------------------------------------------------
    served = policy.score(probe_ids, 1)
    base = policy.score(probe_ids, 0)
    res["delivery"] = {name: vars(compare(1, learner.probe(probe_ids), served, base, 0.5, 0.0))
                       for name, learner in learners.items()}
    policy.load_adapter(6, zeroed)
    res["delivery"]["zeroed_adapter"] = vars(compare(6, learners["bf16"].probe(probe_ids), policy.score(probe_ids, 6),
                                                     base, 0.5, 0.0))
    sample = policy.generate(prompts[:2], SamplingParams(max_new_tokens=256, temperature=1.0, n=4, seed=3), 1)
    res["mismatch"] = {name: mismatch(learner, [c for g in sample for c in g], 1.0) for name, learner in learners.items()}
    res["effect_share_on_samples"] = {name: effect_shares(policy, learner, [c for g in sample for c in g])
                                      for name, learner in learners.items()}
    stops = [c for g in sample for c in g if c.finish_reason == "stop"]
    res["stop_token_kept"] = all(c.token_ids[-1] in policy._stop_ids for c in stops)
    res["finished_by_stop"] = len(stops)
    policy.close()

    shares = res["effect_share_on_samples"]
    rows = [("hf tokens/s (1 group of 8)", f"{hf_rate_s:.0f}"),
            ("vLLM tokens/s, 1 group of 8", f"{one[0]:.0f} ({res['speedup_one_group']:.1f}x hf)"),
            (f"vLLM tokens/s, {args.groups} groups of 8 at once", f"{many[0]:.0f} ({res['speedup_concurrent']:.1f}x hf)"),
            ("vLLM engine start", f"{res['vllm_engine_start_s']:.1f} s"),
            ("adapter hot-load (v1..v5), s", " ".join(f"{x:.3f}" for x in loads)),
            ("delivery share vs bf16 / fp32 learner", f"{res['delivery']['bf16']['share']:.3f} / "
                                                      f"{res['delivery']['fp32']['share']:.3f} "
                                                      f"(effect {res['delivery']['bf16']['shift']:.4f} nats/token)"),
            ("delivery share of a zeroed adapter", f"{res['delivery']['zeroed_adapter']['share']:.3f}"),
            ("delivery correlation vs bf16 / fp32 learner", f"{res['delivery']['bf16']['correlation']:.3f} / "
                                                            f"{res['delivery']['fp32']['correlation']:.3f}"),
            ("share on sampled tokens, generation / prompt path, bf16 learner",
             f"{shares['bf16']['generation_path']:.3f} / {shares['bf16']['prompt_path']:.3f} ({shares['bf16']['tokens']} tokens)"),
            ("the same, fp32 learner", f"{shares['fp32']['generation_path']:.3f} / {shares['fp32']['prompt_path']:.3f}"),
            ("their correlations, fp32 learner", f"{shares['fp32']['generation_path_correlation']:.3f} / "
                                                 f"{shares['fp32']['prompt_path_correlation']:.3f}"),
            ("mismatch |dlogp| bf16 / fp32 learner", f"{res['mismatch']['bf16']['mean_abs_logprob_diff']:.4f} / "
                                                     f"{res['mismatch']['fp32']['mean_abs_logprob_diff']:.4f}"),
            ("mismatch KL (k3) bf16 / fp32", f"{res['mismatch']['bf16']['kl_k3_per_token']:.5f} / {res['mismatch']['fp32']['kl_k3_per_token']:.5f}")]
    print("| figure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    if args.out:
        args.out.write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
