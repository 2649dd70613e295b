"""Contrastive-RL prompts (`build_prompt`) and robust extraction of the answer's code (`parse_completion`)."""

from rl_kernels.prompts.builder import Exemplar, PromptMode, build_prompt
from rl_kernels.prompts.parsing import ANSWER_SECTIONS, ParsedAnswer, parse_completion, strip_thinking

__all__ = [
    "ANSWER_SECTIONS",
    "Exemplar",
    "ParsedAnswer",
    "PromptMode",
    "build_prompt",
    "parse_completion",
    "strip_thinking",
]
