"""rl_kernels/novelty.py: a rung written back out, however disguised, is a copy; a rung with one loop
rewritten is a variant; another task's program is new. And benchmarks/best_kernels.py picks, per task,
the policy's fastest archived kernel, never the seed."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from rl_kernels.archive import KernelArchive
from rl_kernels.novelty import Reference, judge, normalise, similarity, task_references
from rl_kernels.rollout import SEED_POLICY_VERSION
from rl_kernels.tasks import get_task
from rl_kernels.types import Measurement

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "best_kernels.py"
_SPEC = importlib.util.spec_from_file_location("best_kernels", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
best_kernels = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = best_kernels   # its dataclasses look their module up there
_SPEC.loader.exec_module(best_kernels)

TASK = get_task("builtin/scale_bias_relu")
REFS = task_references(TASK, "cpu")
SEED = REFS[0].source
SEED_LOOP = """    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < f; ++j) {
            const float v = in[r * f + j] * s[j] + b[j];
            out[r * f + j] = v > 0.0f ? v : 0.0f;
        }
    }"""
# The same loop nest walked with pointers instead of indices.
POINTER_LOOP = """    const float* p = in;
    float* q = out;
    const float* const stop = in + rows * f;
    while (p != stop) {
        for (const float *sp = s, *bp = b; sp != s + f; ++sp, ++bp, ++p, ++q) {
            const float v = *p * *sp + *bp;
            *q = v > 0.0f ? v : 0.0f;
        }
    }"""
RENAMES = {"cpp_source": "code", "ext": "lib", "scale_bias_relu_forward": "fused", "in": "src", "out": "dst",
           "rows": "n_rows", "features": "width", "f": "cols", "s": "sc", "b": "bi", "v": "val", "j": "col",
           "y": "result"}


def _disguised(source: str) -> str:
    """The source with many of its names renamed, comments and docstrings added and the layout
    changed: what a copy looks like when it tries not to."""
    source = source.replace("{\n", "{  // open\n    /* a block\n       comment */\n")
    source = source.replace("    return y;", "\n\n        return   y ;")
    source = source.replace("class ModelNew(nn.Module):\n",
                            'class ModelNew(nn.Module):\n    """Scale, bias and ReLU in one pass."""\n\n    # state\n')
    for old, new in RENAMES.items():
        source = re.sub(rf"\b{old}\b", new, source)
    return '"""A fused kernel."""\n' + source


def test_ladder_has_the_seed_first_and_its_rungs() -> None:
    assert [r.name for r in REFS][0] == "seed" and len(REFS) >= 3


def test_a_rung_itself_is_a_copy_of_itself() -> None:
    for ref in REFS:
        novelty = judge(ref.source, REFS)
        assert (novelty.nearest, novelty.similarity, novelty.verdict) == (ref.name, 1.0, "copy")


def test_a_disguised_rung_is_still_an_exact_copy() -> None:
    disguised = _disguised(SEED)
    assert "src" in disguised and "// open" in disguised and "return   result ;" in disguised
    assert normalise(disguised) == normalise(SEED)
    assert judge(disguised, REFS) == judge(SEED, REFS)


def test_renaming_is_what_matches_a_renamed_copy() -> None:
    disguised = _disguised(SEED)
    assert similarity(disguised, SEED, rename=False) < 0.95 <= similarity(disguised, SEED)


def test_a_rung_with_one_loop_restructured_is_a_variant() -> None:
    assert SEED_LOOP in SEED
    novelty = judge(SEED.replace(SEED_LOOP, POINTER_LOOP), REFS)
    assert novelty.nearest == "seed" and novelty.verdict == "variant" and 0.7 <= novelty.similarity < 0.95


def test_another_tasks_rung_is_new() -> None:
    for ref in task_references(get_task("builtin/softmax"), "cpu"):
        assert judge(ref.source, REFS).verdict == "new"


def test_c_comments_and_layout_do_not_count_outside_python() -> None:
    plain = "__global__ void k(float* x) { x[0] = 1.0f; }\n"
    noisy = "// kernel\n__global__ void k(float* x)\n{\n  /* one */ x[0] = 1.0f;  // store\n}\n"
    assert normalise(noisy) == normalise(plain)
    assert normalise(plain)[:3] == ["__global__", "void", "id0"]


def test_no_references_is_new_and_bad_thresholds_are_refused() -> None:
    assert judge(SEED, []).nearest is None and judge(SEED, []).verdict == "new"
    with pytest.raises(ValueError, match="thresholds"):
        judge(SEED, REFS, copy_threshold=0.6, variant_threshold=0.7)


def test_the_nearest_of_equals_is_the_first() -> None:
    refs = [Reference("a", SEED), Reference("b", SEED)]
    assert judge(SEED, refs).nearest == "a"


def _passed(task: str, speedup: float) -> Measurement:
    return Measurement(task=task, backend="cpu", mode="kernel", compiled=True, correct=True,
                       candidate_ms=1.0 / speedup, baseline="eager", baseline_ms=1.0, speedup=speedup,
                       reward=1.0, device="cpu")


def test_best_kernels_are_the_policys_fastest_never_the_seed(tmp_path: Path) -> None:
    with KernelArchive(tmp_path / "archive.sqlite") as archive:
        archive.add(TASK.id, SEED, _passed(TASK.id, 3.0), policy_version=SEED_POLICY_VERSION, backend="cpu")
        archive.add(TASK.id, "// v1\n" + SEED, _passed(TASK.id, 1.5), policy_version=1, backend="cpu")
        archive.add(TASK.id, "// v2\n" + SEED, _passed(TASK.id, 2.0), policy_version=2, backend="cpu")
        archive.add(TASK.id, "// cuda\n" + SEED, dataclasses.replace(_passed(TASK.id, 9.0), backend="cuda"),
                    policy_version=3, backend="cuda")
        archive.add("builtin/softmax", SEED, _passed("builtin/softmax", 1.0),
                    policy_version=SEED_POLICY_VERSION, backend="cpu")
    best, seed_only = best_kernels.best_policy_kernels(tmp_path / "archive.sqlite", "cpu")
    assert [(k.task_id, k.policy_version, k.speedup) for k in best] == [(TASK.id, 2, 2.0)]
    assert seed_only == ["builtin/softmax"]
