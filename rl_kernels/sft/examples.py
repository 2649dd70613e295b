"""A verified kernel as a supervised example: the prompt the rollout would send, the ideal answer.

The prompt comes from the rollout's own builder (same task text, rules and, in contrastive mode,
exemplars with measured speedups), so the warm start teaches the situation the policy will be in.
The answer has the sections the parser reads back ("Performance analysis", "Algorithm design",
"Code"); prose an item brings is kept, split by its own headers when it has them, and what it
lacks is filled from the measurement, never invented.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rl_kernels.prompts.builder import Exemplar, PromptMode, build_prompt, fenced
from rl_kernels.prompts.parsing import ANSWER_SECTIONS, CODE_SECTION, Backend, code_language
from rl_kernels.types import Task

_HEADER = re.compile(r"^#{2,4}[ \t]*(" + "|".join(re.escape(s) for s in ANSWER_SECTIONS) + r")[ \t]*#*[ \t]*$",
                     re.MULTILINE | re.IGNORECASE)


@dataclass(frozen=True)
class SftExample:
    messages: list[dict[str, str]]   # system + user, for the tokenizer's chat template
    answer: str                      # the assistant turn the loss is computed on
    task: Task


def analysis_sections(text: str) -> dict[str, str]:
    """The item's prose by answer section: split on its own `### <section>` headers, or all of it
    as the performance analysis when it has none."""
    found = list(_HEADER.finditer(text))
    if not found:
        return {"Performance analysis": text.strip()} if text.strip() else {}
    names = {s.lower(): s for s in ANSWER_SECTIONS}
    sections: dict[str, str] = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        body = text[m.end():end].strip()
        if body:
            sections[names[m.group(1).lower()]] = body
    return sections


def measured_note(speedup: float, baseline: str | None, device: str) -> str:
    """One line of fact about the kernel, used where the item brings no prose of its own."""
    against = f" the {baseline} baseline" if baseline else " the task's baseline"
    return f"Measured by the evaluator: {speedup:.2f}x against{against} on {device or 'the timer device'}."


def format_answer(task: Task, backend: Backend, source: str, analysis: str, note: str) -> str:
    """The answer text in the rollout's format; `note` stands in for missing prose sections."""
    sections = analysis_sections(analysis)
    parts = []
    for name in ANSWER_SECTIONS:
        if name == CODE_SECTION:
            parts.append(f"### {name}\n{fenced(source.strip() + chr(10), code_language(task, backend))}")
        else:
            parts.append(f"### {name}\n{sections.get(name) or note}\n")
    return "\n".join(parts)


def make_example(task: Task, backend: Backend, source: str, analysis: str, note: str,
                 exemplars: list[Exemplar], mode: PromptMode) -> SftExample:
    """The (prompt, answer) pair for one verified kernel.  In contrastive mode the exemplars are
    other verified kernels of the task with their measured speedups (never this one: the answer
    must not be in its prompt); without any, the prompt is plain, as the rollout's fallback is."""
    others = [e for e in exemplars if e.source.strip() != source.strip()]
    if mode == "contrastive" and not others:
        mode = "plain"
    return SftExample(build_prompt(task, backend, others, mode=mode),
                      format_answer(task, backend, source, analysis, note), task)
