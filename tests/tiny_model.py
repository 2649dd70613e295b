"""A tiny random Llama checkpoint and LoRA adapters for it, for policy tests at any tier.

Nothing can be downloaded where tests run, so unit tests (HFPolicy) and integration tests (the
generator actor, which loads the checkpoint in another process) build the same model on disk.
The tokenizer is word-level over a few words, with a chat template, so prompts are short and
token ids readable.  Importable as `tiny_model`: tests/ is on sys.path through tests/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

WORDS = (
    "write a fast cuda kernel for matrix multiply use shared memory tiles and warps please"
).split()
CHAT_TEMPLATE = (
    "<s>{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)
PROMPTS = [
    [{"role": "user", "content": "write a fast cuda kernel"}],
    [
        {"role": "system", "content": "use shared memory"},
        {"role": "user", "content": "write a matrix multiply kernel with tiles and warps please"},
    ],
]
"""Two chat prompts in the tiny vocabulary, of different lengths (so batches are left-padded)."""


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {w: i for i, w in enumerate([*specials, "user", "system", "assistant", ":", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )


def save_tiny_llama(root: Path) -> Path:
    """Save a random 2-layer Llama (hidden 32) and its tokenizer to `root/model`; return that dir.

    Deterministic (seeded), so two tests building it get the same weights."""
    tok = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        initializer_range=0.2,  # peaked enough that adapters visibly change samples
    )
    out = root / "model"
    with torch.random.fork_rng():
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def save_tiny_lora(model_dir: Path, out: Path, seed: int = 1) -> Path:
    """Save a PEFT LoRA adapter for `model_dir` to `out` (returned).  B is random
    (init_lora_weights=False), so unlike a freshly initialised adapter it changes the samples;
    different seeds give different adapters."""
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    lora = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        get_peft_model(base, lora).save_pretrained(out)
    return out
