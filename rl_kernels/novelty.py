"""Is a kernel new, or a copy of one the policy was shown? Its nearest warm-start program and how close.

A policy fine-tuned on the solution ladder can score well by writing a rung back out, comments
changed and variables renamed. Speed alone cannot tell that from a program of its own, so a run's
best kernel is compared with every ladder rung and the seed of its task (`task_references`).

Both sides are normalised first (`normalise`): comments and docstrings (bare string statements)
are dropped, whitespace disappears into the token boundaries, and, with `rename`, every identifier
that is not a language keyword becomes a placeholder numbered by its first appearance, so a
consistently renamed copy has the same token list as its original. A module candidate is Python
whose C++/CUDA lives in string literals; those strings are lexed as C-like code (their `//` and
`/* */` comments dropped too). A source that is not Python (an hgemm `.cu`/`.cpp`) is lexed as
C-like code whole.

Similarity is difflib's SequenceMatcher ratio on the token lists (1.0 when they are equal). With
`rename` it is the larger of the ratios with and without renaming: renaming undoes a renamed copy,
but placeholders numbered by first appearance all shift after one inserted variable, which the
plain tokens do not.
"""

from __future__ import annotations

import ast
import difflib
import io
import keyword
import re
import tokenize
from dataclasses import dataclass
from typing import Literal

from rl_kernels.tasks.ladder import load_ladder
from rl_kernels.types import Task

Verdict = Literal["copy", "variant", "new"]

# Defaults of the verdict thresholds (benchmarks/best_kernels.py's flags say why these values).
COPY_THRESHOLD = 0.95
VARIANT_THRESHOLD = 0.7

# Words of C, C++ and CUDA that are syntax or built-in types, not names a program chose: renaming
# them would make unrelated programs look alike.
_C_KEYWORDS = frozenset("""
    auto bool break case char const constexpr continue default do double else enum extern false float
    for goto if inline int long namespace nullptr register return short signed sizeof static
    static_cast reinterpret_cast const_cast dynamic_cast struct switch template this true typedef
    typename union unsigned using void volatile while class public private protected operator new
    delete include pragma define ifdef ifndef endif undef unroll omp simd parallel
    __global__ __device__ __host__ __shared__ __constant__ __restrict__ __restrict __forceinline__
    int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t
    """.split())

_C_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFuUlL]*)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|->|\+\+|--|<<|>>|::|&&|\|\||[-+*/%&|^!=<>]=|\S)
    """, re.DOTALL | re.VERBOSE)
# Layout and comments; a statement starts after the first three of these.
_LINE_START = frozenset({tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT})
_PY_DROPPED = _LINE_START | {tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER, tokenize.ENCODING}
_STRING_QUOTE = re.compile(r"^(?P<prefix>[A-Za-z]*)(?P<quote>'''|\"\"\"|'|\")")

# A token: (a name the program chose, so renamed with `rename`; its text).
Token = tuple[bool, str]


@dataclass(frozen=True)
class Reference:
    """A program the policy may have learnt by heart: a ladder rung or the task's seed."""

    name: str      # the rung's name ("seed" for the seed)
    source: str


@dataclass(frozen=True)
class Novelty:
    nearest: str | None   # the closest reference's name; None when the task has none
    similarity: float     # 0..1 against it; 1.0 when equal after normalisation
    verdict: Verdict


def normalise(source: str, *, rename: bool = True) -> list[str]:
    """The token list compared: no comments, docstrings or whitespace; identifiers renamed by first
    appearance when `rename`."""
    tokens = _python_tokens(source) if _is_python(source) else _c_tokens(source)
    return _renamed(tokens) if rename else [text for _, text in tokens]


def similarity(a: str, b: str, *, rename: bool = True) -> float:
    """How much of the two programs' normalised tokens line up, 0..1 (1.0 when equal)."""
    plain = _ratio(normalise(a, rename=False), normalise(b, rename=False))
    return max(plain, _ratio(normalise(a), normalise(b))) if rename else plain


def judge(source: str, references: list[Reference], *, copy_threshold: float = COPY_THRESHOLD,
          variant_threshold: float = VARIANT_THRESHOLD, rename: bool = True) -> Novelty:
    """The nearest reference (the first of equals, in the given order) and the verdict: `copy` at
    or above `copy_threshold`, `variant` at or above `variant_threshold`, else `new`."""
    if not 0 < variant_threshold <= copy_threshold <= 1:
        raise ValueError(f"thresholds must satisfy 0 < variant ({variant_threshold}) <= copy "
                         f"({copy_threshold}) <= 1")
    best_name, best = None, 0.0
    for ref in references:
        score = similarity(source, ref.source, rename=rename)
        if best_name is None or score > best:
            best_name, best = ref.name, score
    verdict: Verdict = ("copy" if best >= copy_threshold else "variant" if best >= variant_threshold
                        else "new")
    return Novelty(best_name, best, verdict)


def task_references(task: Task, backend: str) -> list[Reference]:
    """What the warm start showed for the task: its ladder (the seed first) for a built-in task, its
    seed alone for any other task that has one, else nothing."""
    if task.id.startswith("builtin/"):
        return [Reference(r.name, r.source) for r in load_ladder(backend, [task])]
    seed = task.seeds.get(backend)
    return [] if seed is None else [Reference("seed", seed)]


def _ratio(a: list[str], b: list[str]) -> float:
    """autojunk off: on code, the frequent tokens it would discard (`(`, `;`) are the structure."""
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _is_python(source: str) -> bool:
    """A module candidate parses as Python; a C++/CUDA file practically never does."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def _c_tokens(text: str) -> list[Token]:
    return [(m.lastgroup == "name" and m.group() not in _C_KEYWORDS, m.group())
            for m in _C_TOKEN.finditer(text) if m.lastgroup != "comment"]


def _python_tokens(source: str) -> list[Token]:
    """Python's own tokens, less comments, layout and bare string statements (docstrings); every
    other string is kept as its quotes around its lexed content, where a module's kernel lives."""
    raw = list(tokenize.generate_tokens(io.StringIO(source).readline))
    out: list[Token] = []
    line_start = True
    for i, tok in enumerate(raw):
        if tok.type in _LINE_START:
            line_start = True
        elif tok.type in _PY_DROPPED:
            continue
        elif tok.type == tokenize.STRING and line_start and _ends_statement(raw, i):
            continue   # a docstring, or the next part of one written as adjacent strings
        else:
            out.extend(_string_tokens(tok.string) if tok.type == tokenize.STRING
                       else [(tok.type == tokenize.NAME and not keyword.iskeyword(tok.string), tok.string)])
            line_start = False
    return out


def _ends_statement(raw: list[tokenize.TokenInfo], i: int) -> bool:
    """Whether the strings from raw[i] on are a whole statement (implicit concatenation included)."""
    for tok in raw[i + 1:]:
        if tok.type in (tokenize.STRING, tokenize.COMMENT, tokenize.NL):
            continue
        return tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
    return True


def _string_tokens(literal: str) -> list[Token]:
    """A string literal as its quote and its content lexed as C-like code (prefixes such as r or f
    dropped: they change no kernel)."""
    m = _STRING_QUOTE.match(literal)
    if m is None:
        return [(False, literal)]
    quote = m.group("quote")
    body = literal[m.end():len(literal) - len(quote)]
    return [(False, quote), *_c_tokens(body), (False, quote)]


def _renamed(tokens: list[Token]) -> list[str]:
    names: dict[str, str] = {}
    out = []
    for chosen, text in tokens:
        if chosen:
            text = names.setdefault(text, f"id{len(names)}")
        out.append(text)
    return out
