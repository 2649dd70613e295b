"""Weight sync on the hf backend: how long loading a new policy version takes while a generation runs.

    python benchmarks/weight_sync.py [--model SmolLM2-135M-Instruct] [--device cpu] [--rank 8]
                                     [--max-new-tokens 256] [--out docs/results/weight-sync.md]

Writes a LoRA adapter (random B, so it is a real change) for the model, starts a generation of
one group (4 completions of a built-in task's prompt) in a thread, loads the adapter as soon as the
generation is sampling, and reports the load's latency against the generation's length (what a
load had to wait for when one lock covered both), plus a load with nothing running.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from rl_kernels.config import LoraSettings  # noqa: E402
from rl_kernels.policy import SamplingParams  # noqa: E402
from rl_kernels.policy.hf import HFPolicy  # noqa: E402
from rl_kernels.policy.models import resolve_model  # noqa: E402
from rl_kernels.prompts import Exemplar, build_prompt  # noqa: E402
from rl_kernels.tasks import get_task  # noqa: E402


def write_adapter(model_path: Path, out: Path, rank: int, seed: int) -> Path:
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=LoraSettings().target_modules,
                      init_lora_weights=False)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        get_peft_model(AutoModelForCausalLM.from_pretrained(model_path), lora).save_pretrained(out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = ap.parse_args()
    path = resolve_model(args.model)
    tmp = Path(tempfile.mkdtemp(prefix="weight-sync-"))
    adapters = [write_adapter(path, tmp / f"policy-v{k}", args.rank, seed=k) for k in (1, 2, 3)]
    policy = HFPolicy(path, device=args.device, max_loaded_adapters=3, batch_size=4)
    policy.load_adapter(1, adapters[0])
    task = get_task("builtin/softmax")
    prompt = build_prompt(task, "cpu", [Exemplar(task.seeds["cpu"], 1.0)])
    params = SamplingParams(n=4, max_new_tokens=args.max_new_tokens, seed=0)

    t0 = time.perf_counter()
    policy.load_adapter(2, adapters[1])
    idle_load_s = time.perf_counter() - t0

    timing: dict[str, float] = {}

    def generate() -> None:
        start = time.perf_counter()
        policy.generate([prompt], params, adapter_version=1)
        timing["generation_s"] = time.perf_counter() - start

    worker = threading.Thread(target=generate)
    worker.start()
    while policy._in_use != 1:
        time.sleep(0.001)
    t0 = time.perf_counter()
    policy.load_adapter(3, adapters[2])
    timing["busy_load_s"] = time.perf_counter() - t0
    timing["loaded_before_generation_ended"] = float(worker.is_alive())
    worker.join()

    rows = [("model / device / LoRA rank", f"{args.model} / {args.device} / r{args.rank}"),
            ("threads", str(torch.get_num_threads())),
            ("load with nothing running", f"{idle_load_s:.3f} s"),
            ("load while a generation runs", f"{timing['busy_load_s']:.3f} s"),
            ("loaded before the generation ended", "yes" if timing["loaded_before_generation_ended"] else "no"),
            (f"the generation (1 group x 4, {args.max_new_tokens} new tokens)", f"{timing['generation_s']:.1f} s")]
    table = "| figure | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
