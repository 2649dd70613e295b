"""Extracting the code from a policy completion, with a reason code when the answer is malformed.

The reason codes matter for learning, not just for logging: a malformed answer gets the failure
reward without being built, and the counts per code tell whether the model is learning the format.
Parsing is deliberately forgiving about form (missing language tag, ``~~~`` fences, CRLF, prose
around the answer, `<think>` blocks, the prompt echoed back) and strict only where guessing could
pick the wrong code: a block in another language, several candidate blocks outside the Code
section, or a fence left open because generation hit its token limit.

The answer format (section names, code language) lives here and `builder` imports it, so the
prompt and the parser cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from rl_kernels.types import Task

Backend = Literal["cpu", "cuda"]

ANSWER_SECTIONS: tuple[str, ...] = ("Performance analysis", "Algorithm design", "Code")
CODE_SECTION = "Code"

# Fence language tags accepted as "the right language", per expected language.
LANGUAGE_ALIASES: dict[str, frozenset[str]] = {
    "python": frozenset({"python", "py", "python3"}),
    "cuda": frozenset({"cuda", "cu", "cpp", "c++", "cxx", "cc", "c"}),  # a .cu file is C++ too
    "cpp": frozenset({"cpp", "c++", "cxx", "cc", "c"}),
}

_THINK_RE = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_HEADER_RE = re.compile(r"^#{2,4}[ \t]*(?P<name>[^\n#]+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_FENCE_OPEN_RE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)


def code_language(task: Task, backend: Backend) -> str:
    """The fence tag an answer's code block must carry: a module answer is a Python file; an hgemm
    answer is the kernel's single translation unit, CUDA or C++ depending on the backend."""
    if task.kind == "module":
        return "python"
    return "cuda" if backend == "cuda" else "cpp"


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: language tag (lower-cased, may be empty), body, where its fences start and
    end in the text, and whether it closed."""

    language: str
    code: str
    start: int
    end: int
    closed: bool


@dataclass
class ParsedAnswer:
    """What `parse_completion` found.  `code` is None exactly when `reason` is set."""

    code: str | None
    reason: str | None
    sections: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)


def strip_thinking(text: str) -> str:
    """Remove `<think>...</think>` blocks (an unclosed one runs to the end: it is all reasoning)."""
    return _THINK_RE.sub("", text)


def find_code_blocks(text: str) -> list[CodeBlock]:
    """Fenced blocks in CommonMark's sense: a closing fence uses the opening character and is at
    least as long, so a ```` block can contain ``` lines (the builder fences exemplars this way)."""
    blocks: list[CodeBlock] = []
    pos = 0
    while (opening := _FENCE_OPEN_RE.search(text, pos)) is not None:
        fence = opening["fence"]
        closing_re = re.compile(
            rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE
        )
        body_start = opening.end() + 1
        closing = closing_re.search(text, body_start) if body_start <= len(text) else None
        language = opening["info"].strip().split(" ")[0].lower() if opening["info"].strip() else ""
        if closing is None:
            blocks.append(CodeBlock(language, text[body_start:], opening.start(), len(text), closed=False))
            break
        blocks.append(CodeBlock(language, text[body_start:closing.start()], opening.start(), closing.end(),
                                closed=True))
        pos = closing.end()
    return blocks


def _section_name(header: str) -> str:
    """"3. **Code:**" -> "code": models decorate headers, and the decoration carries no meaning."""
    return re.sub(r"^[\d.)\s*_]+|[\s:*_]+$", "", header).lower()


def split_sections(text: str, blocks: list[CodeBlock]) -> dict[str, tuple[int, int]]:
    """Required section name -> (start, end) of its body.  The *last* occurrence of a header wins,
    because a model that echoes the prompt repeats the header names before answering."""
    # A `### ...` line inside a code block is code (a comment, a preprocessor line), not a header.
    headers = [m for m in _HEADER_RE.finditer(text) if not any(b.start <= m.start() < b.end for b in blocks)]
    wanted = {name.lower(): name for name in ANSWER_SECTIONS}
    sections: dict[str, tuple[int, int]] = {}
    for i, header in enumerate(headers):
        name = wanted.get(_section_name(header["name"]))
        if name is None:
            continue
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        sections[name] = (header.end(), end)
    return sections


def _choose_block(blocks: list[CodeBlock],
                  code_span: tuple[int, int] | None) -> tuple[CodeBlock | None, str | None]:
    """The block inside the Code section (the last one if it holds several), else the only block
    of the answer; several blocks and no Code section is ambiguous, so it is rejected."""
    if code_span is not None:
        inside = [b for b in blocks if code_span[0] <= b.start < code_span[1]]
        if inside:
            return inside[-1], None
    if not blocks:
        return None, "no_code_block"
    if len(blocks) > 1:
        return None, "multiple_code_blocks"
    return blocks[0], None


def parse_completion(text: str, task: Task, backend: Backend) -> ParsedAnswer:
    """Extract the candidate source from a completion.

    Reasons: "no_code_block", "multiple_code_blocks" (several blocks, none under ### Code),
    "wrong_language" (the chosen block is tagged with another language), "truncated" (the chosen
    block's fence never closes), "empty_code".  Soft flags (the code is still used):
    "missing_sections" (some required header absent), "no_language_tag", "code_outside_section",
    "extra_code_blocks" (the Code section held more than one block; the last was taken).
    """
    clean = strip_thinking(text.replace("\r\n", "\n").replace("\r", "\n"))
    blocks = find_code_blocks(clean)
    spans = split_sections(clean, blocks)
    sections = {name: clean[lo:hi].strip() for name, (lo, hi) in spans.items()}
    flags = ["missing_sections"] if len(spans) < len(ANSWER_SECTIONS) else []

    code_span = spans.get(CODE_SECTION)
    # Blocks before the last Code header belong to an echoed prompt (its exemplars) or to the
    # analysis, never to the answer: taking one would resubmit an exemplar as the model's kernel.
    candidates = [b for b in blocks if code_span is None or b.start >= code_span[0]]
    block, reason = _choose_block(candidates, code_span)
    if block is None:
        return ParsedAnswer(None, reason, sections, flags)
    if code_span is None or not code_span[0] <= block.start < code_span[1]:
        flags.append("code_outside_section")
    elif sum(code_span[0] <= b.start < code_span[1] for b in candidates) > 1:
        flags.append("extra_code_blocks")
    if not block.closed:
        return ParsedAnswer(None, "truncated", sections, flags)
    expected = code_language(task, backend)
    if not block.language:
        flags.append("no_language_tag")
    elif block.language not in LANGUAGE_ALIASES[expected]:
        return ParsedAnswer(None, "wrong_language", sections, flags)
    if not block.code.strip():
        return ParsedAnswer(None, "empty_code", sections, flags)
    return ParsedAnswer(block.code, None, sections, flags)
