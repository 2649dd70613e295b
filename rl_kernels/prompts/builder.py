"""Contrastive-RL prompts: the task, the evaluator's rules, and scored exemplars to compare.

CUDA-L1's Contrastive-RL shows the model several earlier kernels *with their measured speedups*
and asks it to explain why the fast ones are fast before writing a new one; the comparison is the
learning signal the prompt adds on top of the reward.  The plain mode drops the exemplars so the
contribution of the contrast can be measured (an ablation), changing nothing else.

Every piece of prompt text is a module-level template, so wording is changed in one place and a
test can check that the prompt states what the evaluator actually enforces.  The answer format
(section names, code language) comes from `parsing`, which reads the answers back.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Literal

from rl_kernels.prompts.parsing import ANSWER_SECTIONS, Backend, code_language
from rl_kernels.types import Task

PromptMode = Literal["contrastive", "plain"]


@dataclass(frozen=True)
class Exemplar:
    """An earlier kernel for this task and its measured speedup over the task's baseline.

    Plain data, so the archive (or a test) can produce exemplars without the prompt code knowing
    how they were stored or sampled."""

    source: str
    speedup: float


SYSTEM_PROMPT = (
    "You are an expert performance engineer who writes fast, correct {device} kernels. "
    "You reason about memory traffic, parallelism and arithmetic intensity before writing code, "
    "and you answer in exactly the format the user asks for."
)

DEVICE_NAMES: dict[str, str] = {"cpu": "CPU (C++)", "cuda": "NVIDIA GPU (CUDA)"}

MODULE_TASK_TEMPLATE = """\
## Task {task_id}
{description_line}Here is the reference PyTorch program. It defines `Model`, `get_inputs()` and \
`get_init_inputs()`:

{reference_block}

Write a Python file that defines `class ModelNew(nn.Module)`, a drop-in replacement for `Model`:
- `ModelNew(*get_init_inputs())` must construct it and `ModelNew(...)(*get_inputs())` must return \
the same outputs (same shapes, dtypes and device) as `Model`, within floating-point tolerance.
- It is constructed under the same random seed as `Model`: create any parameters in the same order \
and with the same shapes, so they get the same initial values.
- The computation must run in your own native code, compiled with \
`torch.utils.cpp_extension.load_inline` called at the top level of the file. Python may only \
allocate outputs, call `.contiguous()`, and call your extension.
{backend_rules}"""

MODULE_BACKEND_RULES: dict[str, str] = {
    "cpu": (
        "- Backend: CPU. Pass C++ only (`cpp_sources=...`, no `cuda_sources`). Read and write the "
        "tensors through raw pointers (`data_ptr<float>()`) in plain C++ loops; vectorise, block for "
        "caches, and parallelise with `#pragma omp` if you like (add `-fopenmp` to the flags).\n"
    ),
    "cuda": (
        "- Backend: CUDA. Write `__global__` kernels in `cuda_sources` (declare the host functions in "
        "`cpp_sources`), launched on the current stream (`at::cuda::getCurrentCUDAStream()`).\n"
    ),
}

HGEMM_TASK_TEMPLATE = """\
## Task {task_id}
Write a half-precision GEMM: C[M x N] = A[M x K] . B[K x N] with M = {m}, N = {n}, K = {k}.
- Inputs and output are fp16 (`torch::kHalf`, `__half`); accumulate in {accumulator}.
- Layouts: `a` is row-major (M, K); `b` is row-major (K, N); `b_col_major` holds the same B \
transposed, stored contiguously as N x K (K fastest) inside a tensor of shape (K, N), so use \
whichever layout suits your kernel; `c` is row-major (M, N), already allocated: write every element.
- Entry point: exactly one function with this signature (any name), which the evaluator calls:

{abi_block}

- The whole kernel is one translation unit: a single {language_name} file that includes \
`<torch/extension.h>`, with no Python, no other files and no extra link libraries.
{backend_rules}"""

HGEMM_ABI = "void entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c);"

HGEMM_ACCUMULATORS: dict[str, str] = {
    "fp32": "fp32 (sum in float, round to half once at the end)",
    "fp16": "fp16 (partial sums in half precision are allowed; accuracy is checked against an fp32 "
            "product with a tolerance that grows with K)",
}

HGEMM_BACKEND_RULES: dict[str, str] = {
    "cpu": "- Backend: CPU. C++ on raw pointers; SIMD and `#pragma omp` parallel loops are allowed.\n",
    "cuda": "- Backend: CUDA. Launch your kernels on the current (default) stream; tensor cores "
            "(WMMA/MMA PTX), `cp.async` and shared-memory pipelining are all allowed.\n",
}

LANGUAGE_NAMES: dict[str, str] = {"python": "Python", "cuda": "CUDA C++", "cpp": "C++"}

RULES_TEMPLATE = """\
## Rules the evaluator enforces
{work_rule}
- No extra streams, CUDA graphs, threads (`std::thread`, pthreads), processes, files, network or \
environment access; nothing that defers or caches work between calls.
- Outputs are checked on fresh inputs drawn from several distributions (normal, uniform, heavy-\
tailed, mixed-sign){variant_note}; hard-coding or caching results fails.
- Speed is timed against {baseline}; the reward grows with your speedup, and only correct code is \
timed.
"""

VARIANT_NOTE = " and on other input shapes"

WORK_RULES: dict[bool, str] = {
    False: "- Your code must do the work itself: no calls to torch/ATen compute ops, cuBLAS, cuDNN or "
           "other libraries for the computation (allocating outputs is fine).",
    True: "- This task is an exception to the native-code rule: PyTorch-level rewrites (torch ops in "
          "`forward`) are accepted too, but no cuBLAS, cuDNN or other libraries linked into your code.",
}

BASELINES: dict[str, str] = {
    "module": "the reference `Model` in PyTorch eager mode and under `torch.compile` (the faster of the two)",
    "hgemm": "`torch.matmul`, cuBLAS and cuBLASLt (the fastest of them)",
}

EXEMPLARS_HEADER = """\
## Earlier kernels for this task, with their measured speedups (slowest first)
"""

EXEMPLAR_TEMPLATE = """\
Kernel {label}: {speedup:.2f}x{note}
{code_block}
"""

SEED_NOTE = " (the seed)"

CONTRASTIVE_INSTRUCTION = """\
## What to do
Compare the kernels above. Explain what makes the faster ones faster (and what still limits \
them), then design and write a kernel that is faster than all of them.
"""

PLAIN_INSTRUCTION = """\
## What to do
Analyse where the time goes in this computation, then design and write a kernel that is as fast \
as possible.
"""

ANSWER_FORMAT_TEMPLATE = """\
## Answer format
Answer with exactly these three sections, in this order:
{section_lines}
The Code section must contain exactly one fenced code block tagged `{language}`, holding the \
complete file.
"""

SECTION_HINTS: dict[str, str] = {
    "Performance analysis": "what bounds performance: memory traffic, compute or launch overhead, and why",
    "Algorithm design": "the kernel you will write: work decomposition, tiling, memory access, parallelism",
    "Code": "the complete source",
}


def fenced(source: str, language: str) -> str:
    """A fenced block that the source cannot close early: the fence is longer than any backtick run
    inside it (CommonMark), and the body is followed by a newline so the closing fence starts a line."""
    longest = max((len(run) for run in re.findall(r"`{3,}", source)), default=2)
    fence = "`" * max(3, longest + 1)
    body = source if source.endswith("\n") else source + "\n"
    return f"{fence}{language}\n{body}{fence}"


def _task_text(task: Task, backend: Backend) -> str:
    if task.kind == "module":
        description = f"{task.description}\n" if task.description else ""
        return MODULE_TASK_TEMPLATE.format(
            task_id=task.id,
            description_line=description,
            reference_block=fenced(task.source, "python"),
            backend_rules=MODULE_BACKEND_RULES[backend],
        )
    spec = task.hgemm
    if spec is None:
        raise ValueError(f"task {task.id} is an hgemm task without an HgemmSpec")
    language = code_language(task, backend)
    return HGEMM_TASK_TEMPLATE.format(
        task_id=task.id, m=spec.m, n=spec.n, k=spec.k,
        accumulator=HGEMM_ACCUMULATORS[spec.accumulator],
        abi_block=fenced(HGEMM_ABI, language),
        language_name=LANGUAGE_NAMES[language],
        backend_rules=HGEMM_BACKEND_RULES[backend],
    )


def _rules_text(task: Task) -> str:
    return RULES_TEMPLATE.format(
        work_rule=WORK_RULES[task.allow_torch_ops],
        variant_note=VARIANT_NOTE if task.kind == "module" else "",
        baseline=BASELINES[task.kind],
    )


def _exemplars_text(task: Task, backend: Backend, exemplars: list[Exemplar]) -> str:
    """Exemplars sorted by speedup, ascending, so the contrast reads as a progression; the seed is
    recognised by its source so the model knows which kernel is the plain starting point."""
    if len(exemplars) > len(string.ascii_uppercase):
        raise ValueError(f"at most {len(string.ascii_uppercase)} exemplars fit a prompt, got {len(exemplars)}")
    language = code_language(task, backend)
    seed = task.seeds.get(backend, "").strip()
    ordered = sorted(exemplars, key=lambda e: e.speedup)
    parts = [EXEMPLARS_HEADER]
    for label, exemplar in zip(string.ascii_uppercase, ordered):
        note = SEED_NOTE if seed and exemplar.source.strip() == seed else ""
        parts.append(EXEMPLAR_TEMPLATE.format(
            label=label, speedup=exemplar.speedup, note=note, code_block=fenced(exemplar.source, language)
        ))
    return "\n".join(parts)


def _answer_format_text(task: Task, backend: Backend) -> str:
    lines = "\n".join(f"### {name}\n({SECTION_HINTS[name]})" for name in ANSWER_SECTIONS)
    return ANSWER_FORMAT_TEMPLATE.format(section_lines=lines, language=code_language(task, backend))


def build_prompt(task: Task, backend: Backend, exemplars: list[Exemplar], *,
                 mode: PromptMode = "contrastive") -> list[dict[str, str]]:
    """Chat messages (system, user) for a tokenizer's chat template.

    In "plain" mode the exemplars are ignored, so an ablation flips only the mode and keeps the
    rest of the pipeline (archive sampling included) identical.  "contrastive" needs at least one
    exemplar: without one there is nothing to compare, and silently sending a plain prompt would
    corrupt the ablation."""
    if backend not in DEVICE_NAMES:
        raise ValueError(f"backend {backend!r} must be one of {sorted(DEVICE_NAMES)}")
    if mode == "contrastive" and not exemplars:
        raise ValueError(f"task {task.id}: a contrastive prompt needs at least one exemplar")
    parts = [_task_text(task, backend), _rules_text(task)]
    if mode == "contrastive":
        parts += [_exemplars_text(task, backend, exemplars), CONTRASTIVE_INSTRUCTION]
    elif mode == "plain":
        parts.append(PLAIN_INSTRUCTION)
    else:
        raise ValueError(f"prompt mode {mode!r} must be 'contrastive' or 'plain'")
    parts.append(_answer_format_text(task, backend))
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(device=DEVICE_NAMES[backend])},
        {"role": "user", "content": "\n".join(parts)},
    ]
