"""Warm-start data: every reader on small fixture files (malformed ones included), the answer
format read back by the rollout's parser, and re-verification by the real evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_kernels.archive import KernelArchive
from rl_kernels.config import ConfigError, EvalConfig, load_config
from rl_kernels.evaluation.evaluator import Evaluator
from rl_kernels.prompts.builder import Exemplar
from rl_kernels.prompts.parsing import parse_completion
from rl_kernels.sft.examples import analysis_sections, format_answer, make_example
from rl_kernels.sft.sources import read_archive, read_cuda_l1, read_cuda_l2_dir, read_jsonl, read_source
from rl_kernels.sft.verify import verify
from rl_kernels.tasks import get_task, load_suite
from rl_kernels.types import Measurement

REPO = Path(__file__).resolve().parents[2]
RELU_TASK = (REPO / "tests" / "candidates" / "honest" / "tasks" / "relu.py").read_text()
HGEMM = "hgemm/fp32/64_64_64"


def test_jsonl_keeps_good_lines_and_names_every_bad_one(tmp_path: Path) -> None:
    seed = get_task(HGEMM).seeds["cpu"]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join([
        json.dumps({"task": HGEMM, "source": seed, "analysis": "blocked"}),
        "{not json",
        json.dumps({"task": HGEMM}),
        json.dumps({"task": "builtin/no_such_task", "source": "x"}),
        json.dumps({"task": "hgemm/fp32/64_64", "source": "x"}),
        json.dumps({"task": HGEMM, "source": "   "}),
        "",
    ]))
    got = read_jsonl(path)
    assert [(i.task.id, i.analysis, i.origin) for i in got.items] == [(HGEMM, "blocked", f"{path}:1")]
    assert [(s.origin.rsplit(":", 1)[1], s.reason) for s in got.skipped] == [
        ("2", "malformed"), ("3", "malformed"), ("4", "unknown_task"), ("5", "unknown_task"), ("6", "no_code")]
    assert "close matches" in got.skipped[2].detail or "unknown task" in got.skipped[2].detail


def test_a_cuda_l2_directory_maps_file_names_to_hgemm_tasks(tmp_path: Path) -> None:
    (tmp_path / "64_128_256.cu").write_text("// kernel")
    (tmp_path / "README.md").write_text("not a kernel")
    (tmp_path / "64_0128_256.cu").write_text("// leading zero")
    got = read_cuda_l2_dir(tmp_path, "fp16")
    assert [i.task.id for i in got.items] == ["hgemm/fp16/64_128_256"]
    assert sorted(s.reason for s in got.skipped) == ["not_a_kernel_name", "unknown_task"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_cuda_l2_dir(tmp_path / "missing", "fp32")


def test_cuda_l1_records_carry_their_own_task(tmp_path: Path) -> None:
    path = tmp_path / "h100.json"
    path.write_text("\n".join([
        json.dumps({"level_id": 1, "task_id": 19, "ref_code": RELU_TASK, "custom_code": "class ModelNew: pass"}),
        json.dumps({"level_id": 1, "task_id": 2, "ref_code": RELU_TASK, "custom_code": None}),
        json.dumps({"level_id": 1, "task_id": 3, "ref_code": "x = 1\n", "custom_code": "y"}),
        json.dumps(["not", "an", "object"]),
    ]))
    got = read_cuda_l1(path)
    assert [(i.task.id, i.task.kind) for i in got.items] == [("kernelbench/L1/19", "module")]
    assert [s.reason for s in got.skipped] == ["no_code", "unknown_task", "malformed"]
    assert "get_inputs" in got.skipped[1].detail


def test_an_archive_gives_back_its_verified_kernels(tmp_path: Path) -> None:
    m = Measurement(task=HGEMM, backend="cpu", mode="kernel", compiled=True, correct=True, speedup=1.5,
                    candidate_ms=1.0, baseline_ms=1.5, baseline="torch_matmul", reward=0.4)
    with KernelArchive(tmp_path / "archive.sqlite") as archive:
        assert archive.add(HGEMM, "// fast kernel\n", m, policy_version=3, backend="cpu")
    got = read_source("archive", tmp_path / "archive.sqlite", backend="cpu")
    assert [(i.task.id, i.source) for i in got.items] == [(HGEMM, "// fast kernel\n")]
    assert read_archive(tmp_path / "archive.sqlite", "cuda").items == []
    with pytest.raises(ValueError, match="unknown SFT source kind"):
        read_source("parquet", tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a path"):
        read_source("archive", None)


def test_the_builtin_source_takes_no_path_and_every_other_kind_needs_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="leave path unset"):
        load_config(None, [f'sft.sources=[{{"kind": "builtin", "path": "{tmp_path}"}}]'])
    with pytest.raises(ConfigError, match="jsonl needs a path"):
        load_config(None, ['sft.sources=[{"kind": "jsonl"}]'])
    got = read_source("builtin", None, backend="cuda")
    assert {i.task.id for i in got.items} == {t.id for t in load_suite("builtin")}
    assert all(i.origin.startswith("builtin ladder cuda/") for i in got.items)


def test_the_answer_is_read_back_by_the_rollout_parser() -> None:
    task = get_task(HGEMM)
    source = task.seeds["cpu"]
    prose = "### Performance analysis\nMemory bound at this size.\n### Algorithm design\nRow blocks of 8."
    assert analysis_sections(prose) == {"Performance analysis": "Memory bound at this size.",
                                        "Algorithm design": "Row blocks of 8."}
    answer = format_answer(task, "cpu", source, prose, "Measured: 1.00x.")
    parsed = parse_completion(answer, task, "cpu")
    assert parsed.reason is None and parsed.flags == []
    assert parsed.code.strip() == source.strip()
    assert parsed.sections["Algorithm design"] == "Row blocks of 8."
    bare = parse_completion(format_answer(task, "cpu", source, "", "Measured: 2.00x."), task, "cpu")
    assert bare.sections["Performance analysis"] == "Measured: 2.00x." and bare.code.strip() == source.strip()


def test_a_contrastive_example_never_shows_its_own_answer() -> None:
    task = get_task(HGEMM)
    mine, other = "// mine\nvoid f() {}\n", "// other\nvoid g() {}\n"
    ex = make_example(task, "cpu", mine, "", "note", [Exemplar(mine, 2.0), Exemplar(other, 1.2)], "contrastive")
    prompt = ex.messages[-1]["content"]
    assert "// other" in prompt and "// mine" not in prompt and "1.20x" in prompt
    alone = make_example(task, "cpu", mine, "", "note", [Exemplar(mine, 2.0)], "contrastive")
    assert "// mine" not in alone.messages[-1]["content"]    # nothing to contrast: the plain prompt


def test_only_kernels_that_pass_the_evaluator_are_kept(tmp_path: Path) -> None:
    task = get_task(HGEMM)
    read = tmp_path / "data.jsonl"
    read.write_text("\n".join(json.dumps({"task": HGEMM, "source": s}) for s in (
        task.seeds["cpu"], task.seeds["cpu"] + "\nint broken(\n")))
    items = read_jsonl(read).items
    cfg = EvalConfig(backend="cpu", build={"cache_dir": tmp_path / "cache"})
    seen = []
    got = verify(items, Evaluator(cfg), jobs=2, on_done=lambda item, m: seen.append(m.rejected))
    assert [k.item.origin for k in got.kept] == [f"{read}:1"] and got.kept[0].measurement.speedup > 0
    assert got.counts() == {"compile_error": 1} and seen == [None, "compile_error"]
