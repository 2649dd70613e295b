"""Tiny Llama checkpoints and LoRA adapters for them, for policy tests at any tier.

Nothing can be downloaded where tests run, so unit tests (HFPolicy) and integration tests (the
generator actor, which loads the checkpoint in another process) build the same model on disk.
`save_tiny_llama`: random weights, a word-level tokenizer over a few words, with a chat template,
so prompts are short and token ids readable. `save_memorizing_llama`: a tiny model *trained* to
answer any prompt with one given text, so the rollout pipeline sees parseable answers and runs
real builds and evaluations on them.  Importable as `tiny_model`: tests/ is on sys.path through
tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from rl_kernels.policy.delivery import Probe, next_token_logprobs

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
    return _with_specials(tok, CHAT_TEMPLATE)


def _with_specials(tok: Tokenizer, chat_template: str, **extra: object) -> PreTrainedTokenizerFast:
    """A transformers tokenizer over `tok` with the specials both tiny vocabularies share."""
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", chat_template=chat_template, **extra)


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


LEARNER_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_learner_like_lora(model_dir: Path, out: Path, *, seed: int, std: float) -> Path:
    """A LoRA adapter shaped like the learner's default (r16, alpha 32, every linear layer) for any
    causal LM, with B drawn from N(0, std) so it changes outputs by a chosen amount."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                               LoraConfig(r=16, lora_alpha=32, target_modules=LEARNER_TARGETS))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, std)
    model.save_pretrained(out)
    return out


class PeftScorer:
    """A base model with a PEFT adapter on a device: the learner's view of an adapter's logprobs."""

    def __init__(self, model_dir: Path, adapter: Path, dtype: torch.dtype, device: str = "cuda") -> None:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
        self.model = PeftModel.from_pretrained(base, str(adapter)).eval()
        self.device = device

    @torch.no_grad()
    def logprobs(self, ids: list[int], temperature: float = 1.0, adapter: bool = True) -> list[float]:
        """log p(ids[i] | ids[:i]) for i >= 1, with the adapter on or off."""
        x = torch.tensor([ids], device=self.device)
        with contextlib.nullcontext() if adapter else self.model.disable_adapter():
            return next_token_logprobs(self.model(input_ids=x).logits[0], x[0], temperature)

    def probe(self, ids: list[int], magnify_to: float = 0.0) -> Probe:
        """The probe as the learner writes it (learner/engine.py's `probe_of`)."""
        from rl_kernels.learner.engine import probe_of

        return probe_of(self.model, lambda: self.logprobs(ids), ids, magnify_to)


# ---- a model that has learned one answer by heart ------------------------------------------------
LINE_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""Every role marker is a line of its own, so with a line-level tokenizer it is one token."""
ROLE_LINES = ("<|system|>\n", "<|user|>\n", "<|assistant|>\n")
LINE_SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")


def line_tokenizer(answer: str | list[str]) -> PreTrainedTokenizerFast:
    """Tokens are whole lines, newline included: every line of `answer`, the role markers, the
    empty line, and the specials; any other line (most of a prompt) is <unk>. Decoding
    concatenates tokens exactly (`decoders.Fuse`), so decoding the answer's ids gives it back."""
    texts = [answer] if isinstance(answer, str) else answer
    lines = [*ROLE_LINES, "\n", *(line for text in texts for line in text.splitlines(keepends=True))]
    vocab: dict[str, int] = {}
    for word in [*LINE_SPECIALS, *lines]:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("\n", behavior="merged_with_previous")
    tok.decoder = decoders.Fuse()
    return _with_specials(tok, LINE_CHAT_TEMPLATE, clean_up_tokenization_spaces=False)


def _memorizing_batch(rng: random.Random, answers: list[list[int]], ids: dict[str, int], vocab_size: int,
                      *, rows: int, max_prompt: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`rows` chat sequences: an optional system turn, a user turn whose lines are random (<unk>,
    any known line, runs of the answer itself as an exemplar would quote them), the generation
    prompt, then the answer and EOS. Only the answer and EOS are trained on (labels -100 elsewhere).
    Returns right-padded input_ids, attention_mask and labels, each [rows, longest]."""
    known = [i for i in range(vocab_size) if i not in (ids["<s>"], ids["</s>"], ids["<pad>"])]

    def content() -> list[int]:
        out: list[int] = []
        length = int(max_prompt ** rng.random()) - 1  # log-uniform: mostly short, some long
        while len(out) < length:
            kind = rng.random()
            if kind < 0.5:
                out += [ids["<unk>"]] * rng.randint(1, 8)
            elif kind < 0.8:
                out.append(rng.choice(known))
            else:  # a run of the answer with some lines dropped, as a near-copy exemplar quotes it
                answer = rng.choice(answers)
                lo, drop = rng.randrange(len(answer)), rng.choice((0.0, 0.05, 0.2))
                out += [i for i in answer[lo:rng.randint(lo + 1, len(answer))] if rng.random() >= drop]
        return out[:length]

    seqs: list[tuple[list[int], int]] = []
    for _ in range(rows):
        prompt: list[int] = []
        if rng.random() < 0.5:
            prompt += [ids["<|system|>\n"], *content(), ids["\n"]]
        prompt += [ids["<|user|>\n"], *content(), ids["\n"], ids["<|assistant|>\n"]]
        seqs.append((prompt + rng.choice(answers) + [ids["</s>"]], len(prompt)))
    width = max(len(s) for s, _ in seqs)
    input_ids = torch.full((rows, width), ids["<pad>"], dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    labels = torch.full((rows, width), -100, dtype=torch.long)
    for r, (seq, n_prompt) in enumerate(seqs):
        input_ids[r, : len(seq)] = torch.tensor(seq)
        mask[r, : len(seq)] = 1
        labels[r, n_prompt : len(seq)] = torch.tensor(seq[n_prompt:])
    return input_ids, mask, labels


def save_memorizing_llama(root: Path, answer: str | list[str], *, steps: int = 300, max_prompt_lines: int = 256,
                          seed: int = 0) -> Path:
    """Train a tiny Llama to answer any chat prompt with `answer`, then EOS; save it with its line
    tokenizer to `root/memorizing` and return that dir. Given several answers, it learns to pick
    one of them uniformly at random (the pipeline benchmark uses this for distinct kernels).

    Real training, not a stub: Adam on fp32 weights on the CPU (a few seconds), teacher forcing on
    prompts of random lines up to `max_prompt_lines` long (longer than any rollout prompt). After
    it, sampling at temperature 1 gives back `answer` exactly in nearly every sample: each answer
    token gets probability ~1. Deterministic for a given `seed`.
    """
    texts = [answer] if isinstance(answer, str) else answer
    tok = line_tokenizer(texts)
    ids = tok.get_vocab()
    answers_ids = [tok(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert all(tok.decode(a) == t and ids["<unk>"] not in a for a, t in zip(answers_ids, texts))
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,  # one layer learns this as well as two, in half the time
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2 * (max_prompt_lines + max(map(len, answers_ids)) + 8),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    rng = random.Random(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - k / steps)  # to 0 at the end
        for _ in range(steps):
            input_ids, mask, labels = _memorizing_batch(rng, answers_ids, ids, len(tok), rows=8,
                                                        max_prompt=max_prompt_lines)
            loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            decay.step()
    out = root / "memorizing"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
