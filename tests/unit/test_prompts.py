"""Prompts say what the evaluator enforces, and answers parse back to exactly the code written."""

from __future__ import annotations

import pytest

from rl_kernels.prompts import ANSWER_SECTIONS, Exemplar, build_prompt, parse_completion
from rl_kernels.prompts.builder import HGEMM_ABI
from rl_kernels.tasks import get_task
from rl_kernels.tasks.hgemm import hgemm_task
from rl_kernels.types import Task

MODULE = get_task("builtin/gelu")
HGEMM = hgemm_task("hgemm/fp32/256_512_1024")
BACKENDS = ("cpu", "cuda")
LANG = {("module", "cpu"): "python", ("module", "cuda"): "python",
        ("hgemm", "cpu"): "cpp", ("hgemm", "cuda"): "cuda"}


def _exemplars(task: Task, backend: str) -> list[Exemplar]:
    # Deliberately unsorted: the builder orders them.
    return [Exemplar("// fast kernel\n", 3.25), Exemplar(task.seeds[backend], 1.0),
            Exemplar("// middling kernel\n", 1.5)]


def _answer(code: str, lang: str = "python", fence: str = "```") -> str:
    return ("### Performance analysis\nMemory bound.\n\n### Algorithm design\nVectorise.\n\n"
            f"### Code\n{fence}{lang}\n{code}{fence}\n")


def _user(messages: list[dict[str, str]]) -> str:
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


# --- building ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_module_prompt_contains_reference_rules_and_format(backend: str) -> None:
    text = _user(build_prompt(MODULE, backend, _exemplars(MODULE, backend)))
    assert MODULE.source in text
    assert "ModelNew" in text and "load_inline" in text
    assert ("cpp_sources" in text and "raw pointers" in text) if backend == "cpu" else "__global__" in text
    assert "torch.compile" in text and "several distributions" in text and "streams" in text
    for name in ANSWER_SECTIONS:
        assert f"\n### {name}\n" in text
    assert "tagged `python`" in text


@pytest.mark.parametrize("backend", BACKENDS)
def test_hgemm_prompt_states_shape_abi_layouts_and_single_tu(backend: str) -> None:
    text = _user(build_prompt(HGEMM, backend, _exemplars(HGEMM, backend)))
    assert "M = 256, N = 512, K = 1024" in text
    assert HGEMM_ABI in text and "b_col_major" in text and "fp16" in text and "fp32" in text
    assert "one translation unit" in text and "cuBLAS" in text
    assert f"tagged `{LANG[('hgemm', backend)]}`" in text
    assert "```" + LANG[("hgemm", backend)] + "\n" + HGEMM_ABI in text


@pytest.mark.parametrize("task", [MODULE, HGEMM], ids=["module", "hgemm"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_contrastive_prompt_shows_exemplars_sorted_with_speedups(task: Task, backend: str) -> None:
    text = _user(build_prompt(task, backend, _exemplars(task, backend)))
    labels = ["Kernel A: 1.00x (the seed)", "Kernel B: 1.50x", "Kernel C: 3.25x"]
    positions = [text.index(label) for label in labels]
    assert positions == sorted(positions)
    assert text.index("// middling kernel") < text.index("// fast kernel")
    assert task.seeds[backend] in text
    assert "Compare the kernels above" in text


@pytest.mark.parametrize("task", [MODULE, HGEMM], ids=["module", "hgemm"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_prompt_omits_exemplars_but_keeps_the_rest(task: Task, backend: str) -> None:
    text = _user(build_prompt(task, backend, _exemplars(task, backend), mode="plain"))
    assert "Kernel A" not in text and "// fast kernel" not in text and "Compare" not in text
    for name in ANSWER_SECTIONS:
        assert f"### {name}" in text
    assert build_prompt(task, backend, [], mode="plain") == build_prompt(
        task, backend, _exemplars(task, backend), mode="plain")


def test_contrastive_without_exemplars_is_an_error() -> None:
    with pytest.raises(ValueError, match="exemplar"):
        build_prompt(MODULE, "cpu", [])


def test_exemplar_with_backticks_cannot_close_its_fence_early() -> None:
    tricky = 'doc = """\n```\nnot the end\n```\n"""\n'
    text = _user(build_prompt(MODULE, "cpu", [Exemplar(tricky, 1.2)]))
    assert "````python\n" + tricky + "````" in text


def test_torch_ops_task_gets_the_exception_rule() -> None:
    allowed = Task(id="x/y", kind="module", source=MODULE.source, allow_torch_ops=True)
    assert "PyTorch-level rewrites" in _user(build_prompt(allowed, "cpu", [], mode="plain"))
    assert "PyTorch-level rewrites" not in _user(build_prompt(MODULE, "cpu", [], mode="plain"))


# --- parsing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("task", [MODULE, HGEMM], ids=["module", "hgemm"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_round_trips_byte_identical(task: Task, backend: str) -> None:
    seed = task.seeds[backend]
    parsed = parse_completion(_answer(seed, LANG[(task.kind, backend)]), task, backend)
    assert parsed.reason is None and parsed.flags == []
    assert parsed.code == seed
    assert parsed.sections["Performance analysis"] == "Memory bound."
    assert parsed.sections["Algorithm design"] == "Vectorise."


def test_well_formed_answer_with_thinking_prose_and_crlf() -> None:
    seed = MODULE.seeds["cpu"]
    text = ("<think>Maybe ```python\nbad\n``` first?</think>\nSure! Here is my answer.\n"
            + _answer(seed) + "\nHope this helps.\n").replace("\n", "\r\n")
    parsed = parse_completion(text, MODULE, "cpu")
    assert parsed.reason is None and parsed.code == seed


def test_unclosed_think_block_is_all_reasoning() -> None:
    parsed = parse_completion("<think>```python\nx = 1\n```", MODULE, "cpu")
    assert parsed.reason == "no_code_block"


def test_tilde_fence_and_missing_language_tag() -> None:
    parsed = parse_completion(_answer("x = 1\n", lang="", fence="~~~"), MODULE, "cpu")
    assert parsed.code == "x = 1\n" and parsed.flags == ["no_language_tag"]


def test_echoed_prompt_is_ignored() -> None:
    prompt = _user(build_prompt(MODULE, "cpu", _exemplars(MODULE, "cpu")))
    parsed = parse_completion(prompt + "\n" + _answer("y = 2\n"), MODULE, "cpu")
    assert parsed.reason is None and parsed.code == "y = 2\n"
    assert parsed.sections["Algorithm design"] == "Vectorise."


def test_header_inside_code_is_not_a_section() -> None:
    code = "## Code\nx = 1\n"
    parsed = parse_completion(_answer(code), MODULE, "cpu")
    assert parsed.code == code


def test_block_in_code_section_preferred_over_earlier_blocks() -> None:
    text = ("### Performance analysis\n```python\nold = 1\n```\n### Algorithm design\nplan\n"
            "### Code\n```python\nnew = 2\n```\n")
    assert parse_completion(text, MODULE, "cpu").code == "new = 2\n"


def test_several_blocks_in_code_section_take_the_last_and_flag() -> None:
    text = _answer("a = 1\n") + "```python\nb = 2\n```\n"
    parsed = parse_completion(text, MODULE, "cpu")
    assert parsed.code == "b = 2\n" and "extra_code_blocks" in parsed.flags


def test_single_block_without_sections_is_used_with_soft_flags() -> None:
    parsed = parse_completion("Here:\n```python\nx = 1\n```\n", MODULE, "cpu")
    assert parsed.code == "x = 1\n"
    assert parsed.flags == ["missing_sections", "code_outside_section"]


def test_decorated_headers_are_recognised() -> None:
    text = "## 1. Performance analysis:\nslow\n### **Algorithm design**\nfast\n#### Code\n```py\nx = 1\n```\n"
    parsed = parse_completion(text, MODULE, "cpu")
    assert parsed.code == "x = 1\n" and parsed.flags == []


@pytest.mark.parametrize(("text", "reason"), [
    ("I think you should use tiling.", "no_code_block"),
    ("```python\na = 1\n```\ntext\n```python\nb = 2\n```\n", "multiple_code_blocks"),
    (_answer("int main() {}\n", lang="cpp"), "wrong_language"),
    ("### Performance analysis\nx\n### Algorithm design\ny\n### Code\n```python\nimport torch\n", "truncated"),
    (_answer("\n  \n"), "empty_code"),
])
def test_malformed_module_answers(text: str, reason: str) -> None:
    parsed = parse_completion(text, MODULE, "cpu")
    assert parsed.reason == reason and parsed.code is None


@pytest.mark.parametrize(("backend", "lang", "reason"), [
    ("cuda", "cpp", None), ("cuda", "cu", None), ("cpu", "cuda", "wrong_language"),
    ("cpu", "c++", None), ("cuda", "python", "wrong_language"),
])
def test_hgemm_language_tags(backend: str, lang: str, reason: str | None) -> None:
    assert parse_completion(_answer("void f() {}\n", lang=lang), HGEMM, backend).reason == reason


def test_echoed_prompt_without_an_answer_does_not_resubmit_an_exemplar() -> None:
    prompt = _user(build_prompt(MODULE, "cpu", [Exemplar(MODULE.seeds["cpu"], 1.0)]))
    assert parse_completion(prompt, MODULE, "cpu").reason == "no_code_block"
