"""The fixed train / held-out split: the same tasks held out wherever they come from, and a
held-out task refused wherever training data or training prompts are made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_kernels.cluster.driver import select_tasks
from rl_kernels.learner.warm_start import _read
from rl_kernels.config import ConfigError, SplitConfig, load_config
from rl_kernels.tasks import get_task, load_suite, scan_task_dir
from rl_kernels.tasks.split import HeldoutLeak, task_split

RELU_TASK = '''import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
'''


def test_builtin_tasks_held_out_are_the_suite_files_list() -> None:
    split = task_split(SplitConfig())
    held = [t.id for t in split.heldout(load_suite("builtin"))]
    assert held == ["builtin/swiglu", "builtin/max_dim", "builtin/linear_gelu_scale"]
    assert len(split.train(load_suite("builtin"))) == 12


def test_hgemm_shapes_are_held_out_for_every_accumulator_alike() -> None:
    split = task_split(SplitConfig())
    fp32, fp16 = load_suite("hgemm/fp32"), load_suite("hgemm/fp16")
    held32 = {t.id.split("/")[-1] for t in split.heldout(fp32)}
    held16 = {t.id.split("/")[-1] for t in split.heldout(fp16)}
    assert held32 == held16
    assert 0.15 < len(held32) / len(fp32) < 0.25          # heldout_fraction 0.2 of 1000 shapes
    assert task_split(SplitConfig(salt="another split")).heldout(fp32) != split.heldout(fp32)


def test_a_task_directory_splits_by_path_below_it_wherever_it_lives(tmp_path: Path) -> None:
    ids = {}
    for where in ("clone-a", "elsewhere/clone-b"):
        root = tmp_path / where / "level1"
        root.mkdir(parents=True)
        for i in range(40):
            (root / f"{i}_relu.py").write_text(RELU_TASK)
        tasks, _ = scan_task_dir(root.parent)
        split = task_split(SplitConfig(heldout_fraction=0.25))
        ids[where] = sorted(t.id.split("/", 1)[1] for t in split.heldout(tasks))
    assert ids["clone-a"] == ids["elsewhere/clone-b"] and 0 < len(ids["clone-a"]) < 40


def test_an_explicit_list_replaces_the_rules_and_a_disabled_split_holds_nothing_out() -> None:
    explicit = task_split(SplitConfig(heldout=["builtin/gelu"]))
    assert [t.id for t in explicit.heldout(load_suite("builtin"))] == ["builtin/gelu"]
    assert task_split(SplitConfig(enabled=False)).heldout(load_suite("builtin")) == []


def test_training_prompts_never_reach_a_held_out_task(tmp_path: Path) -> None:
    cfg = load_config(None, [f"run_dir={tmp_path}"])
    assert "builtin/swiglu" not in {t.id for t in select_tasks(cfg)}
    named = load_config(None, [f"run_dir={tmp_path}", "rollout.tasks=[builtin/gelu, builtin/swiglu]"])
    with pytest.raises(HeldoutLeak, match=r"rollout.tasks names 1 held-out task\(s\): builtin/swiglu"):
        select_tasks(named)
    everything = "[" + ", ".join(t.id for t in load_suite("builtin")) + "]"
    with pytest.raises(ConfigError, match="every task of suite 'builtin' is held out"):
        select_tasks(load_config(None, [f"run_dir={tmp_path}", f"split.heldout={everything}"]))


def test_a_held_out_task_in_sft_data_is_an_error_unless_the_source_drops_it(tmp_path: Path) -> None:
    data = tmp_path / "kernels.jsonl"
    rows = [{"task": "builtin/gelu", "source": get_task("builtin/gelu").seeds["cpu"]},
            {"task": "builtin/swiglu", "source": get_task("builtin/swiglu").seeds["cpu"]}]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    source = {"kind": "jsonl", "path": str(data)}
    cfg = load_config(None, [f"run_dir={tmp_path}", f"sft.sources=[{json.dumps(source)}]"])
    with pytest.raises(HeldoutLeak, match="builtin/swiglu"):
        _read(cfg, lambda line: None)
    dropping = load_config(None, [f"run_dir={tmp_path}", f"sft.sources=[{json.dumps({**source, 'drop_heldout': True})}]"])
    loaded = _read(dropping, lambda line: None)
    assert [it.task.id for it in loaded.items] == ["builtin/gelu"]
    assert [(s.reason, s.detail) for s in loaded.skipped] == [("heldout_task", "builtin/swiglu is held out of training")]


def test_the_builtin_ladder_source_drops_its_held_out_tasks_by_itself(tmp_path: Path) -> None:
    cfg = load_config(None, [f"run_dir={tmp_path}", 'sft.sources=[{"kind": "builtin"}]'])
    loaded = _read(cfg, lambda line: None)
    trained = {it.task.id for it in loaded.items}
    held = {s.detail.split()[0] for s in loaded.skipped if s.reason == "heldout_task"}
    assert held == {"builtin/swiglu", "builtin/max_dim", "builtin/linear_gelu_scale"}
    assert trained == {t.id for t in load_suite("builtin")} - held
    assert all(it.analysis.startswith("### Performance analysis") for it in loaded.items)


def test_sft_tasks_keeps_only_the_named_tasks_and_refuses_held_out_or_unknown_ones(tmp_path: Path) -> None:
    base = [f"run_dir={tmp_path}", 'sft.sources=[{"kind": "builtin"}]']
    cfg = load_config(None, [*base, "sft.tasks=[builtin/softmax,builtin/rmsnorm]"])
    loaded = _read(cfg, lambda line: None)
    assert {it.task.id for it in loaded.items} == {"builtin/softmax", "builtin/rmsnorm"}
    assert len(loaded.items) == 6                                   # three rungs each
    assert {s.reason for s in loaded.skipped} == {"not_selected"}   # held-out rungs are not selected either
    with pytest.raises(HeldoutLeak, match="builtin/swiglu"):
        _read(load_config(None, [*base, "sft.tasks=[builtin/softmax,builtin/swiglu]"]), lambda line: None)
    with pytest.raises(ConfigError, match=r"sft.tasks names \['builtin/nope'\]"):
        _read(load_config(None, [*base, "sft.tasks=[builtin/softmax,builtin/nope]"]), lambda line: None)
