"""A run directory moved to another path: its config's paths inside it follow it (re-rooting), a
needed path that did not travel is refused before anything starts, and `train`'s warm start lives
inside the run directory so that it travels too. No Ray: the resumed run itself is
tests/integration/test_train_ray.py's."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rl_kernels.cli import main
from rl_kernels.config import ConfigError, dump_config, load_config
from rl_kernels.learner import warm_start_cache
from rl_kernels.learner.warm_start_cache import WarmStart, place_in_run, start_from
from rl_kernels.run_dir import CONFIG_FILE, load_run_config, rerooted


def _adapter(directory: Path) -> Path:
    """Enough of a PEFT adapter directory for the config's check (and for placing it)."""
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text("{}")
    (directory / "adapter_model.safetensors").write_bytes(b"weights")
    return directory


def _run_with_adapter_inside(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory whose config names an init adapter inside it, as `train` leaves one (and, in
    a list, an sft source inside it)."""
    run = tmp_path / "first" / "run"
    adapter = _adapter(run / "warm_start" / "adapter")
    cfg = load_config(None, [f"run_dir={run}", f"policy.init_adapter={adapter}",
                             f'sft.sources=[{{"kind": "archive", "path": "{run / "archive.sqlite"}"}}]'])
    (run / CONFIG_FILE).write_text(dump_config(cfg))
    return run, adapter


def test_paths_strictly_inside_the_recorded_run_dir_are_re_rooted(tmp_path: Path) -> None:
    new = tmp_path / "new"
    new.mkdir()
    data = {"run_dir": "/old/run",
            "policy": {"init_adapter": "/old/run/warm_start/adapter", "model": "/models/base", "device": "cpu"},
            "eval": {"build": {"cache_dir": "/old/run/../run/cache", "cxx_flags": ["-O3"]}},
            "sft": {"sources": [{"kind": "archive", "path": "/old/run/archive.sqlite"}, {"kind": "builtin"}]},
            "metrics": {"wandb_project": "/old/run"},        # the run directory itself is not inside it
            "suite": "/old/run2/tasks"}                      # a sibling sharing the name's prefix
    assert rerooted(data, new) == {
        "policy.init_adapter": str(new / "warm_start" / "adapter"),
        "eval.build.cache_dir": str(new / "cache"),
        "sft.sources": [{"kind": "archive", "path": str(new / "archive.sqlite")}, {"kind": "builtin"}]}
    # a relative run_dir re-roots relative paths, lexically
    assert rerooted({"run_dir": "runs/a", "policy": {"model": "runs/a/warm_start/model"}}, new) == {
        "policy.model": str(new / "warm_start" / "model")}


def test_nothing_is_re_rooted_in_place_or_under_a_run_dir_of_dot(tmp_path: Path) -> None:
    data = {"run_dir": str(tmp_path), "policy": {"init_adapter": str(tmp_path / "a")}}
    assert rerooted(data, tmp_path) == {}
    assert rerooted({"run_dir": ".", "policy": {"model": "SmolLM2-135M-Instruct"}}, tmp_path) == {}


def test_a_moved_run_resumes_from_its_own_copy_and_says_so(tmp_path: Path) -> None:
    old, _ = _run_with_adapter_inside(tmp_path)
    new = tmp_path / "second" / "run"
    new.parent.mkdir()
    old.rename(new)
    lines: list[str] = []
    cfg = load_run_config(new, ["train.max_steps=7"], lines.append)
    assert cfg.run_dir == new and cfg.policy.init_adapter == new / "warm_start" / "adapter"
    assert cfg.train.max_steps == 7 and cfg.sft.sources[0].path == new / "archive.sqlite"
    assert lines == [f"run directory moved from {old} to {new}: re-rooted policy.init_adapter, sft.sources"]
    # an override names the key's value outright, re-rooted or not
    other = _adapter(tmp_path / "elsewhere")
    assert load_run_config(new, [f"policy.init_adapter={other}"], lines.append).policy.init_adapter == other
    # once the resumed run rewrote its config.yaml (the driver does), it is in place: nothing to say
    (new / CONFIG_FILE).write_text(dump_config(cfg))
    lines.clear()
    assert load_run_config(new, [], lines.append).policy.init_adapter == new / "warm_start" / "adapter"
    assert lines == []


def test_a_needed_path_outside_the_moved_run_is_refused_naming_key_path_and_remedy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache_adapter = _adapter(tmp_path / "cache" / "sft" / "adapter")
    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(None, [f"run_dir={run}", f"policy.init_adapter={cache_adapter}"])
    (run / CONFIG_FILE).write_text(dump_config(cfg))
    shutil.rmtree(tmp_path / "cache")   # a fresh machine: the warm-start cache is empty
    assert main(["train", "--resume", str(run), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"policy.init_adapter {cache_adapter} does not exist on this machine" in err
    assert "outside the run directory" in err and "policy.init_adapter=ITS_NEW_PATH" in err


def test_a_needed_path_inside_the_run_that_is_missing_means_an_incomplete_copy(tmp_path: Path) -> None:
    old, _ = _run_with_adapter_inside(tmp_path)
    new = tmp_path / "copy"
    old.rename(new)
    shutil.rmtree(new / "warm_start")
    with pytest.raises(ConfigError, match=r"policy\.init_adapter .*/copy/warm_start/adapter is missing, though it "
                                          r"lies inside the run directory .*copy the whole directory again"):
        load_run_config(new, [], lambda line: None)


def test_policy_model_is_checked_as_a_path_unless_it_is_a_known_name(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / CONFIG_FILE).write_text(dump_config(load_config(None, [f"run_dir={run}"])))
    assert load_run_config(run, [], lambda line: None).policy.model == "SmolLM2-135M-Instruct"
    gone = tmp_path / "gone" / "model"
    with pytest.raises(ConfigError, match=f"policy.model {gone} does not exist on this machine"):
        load_run_config(run, [f"policy.model={gone}"], lambda line: None)


def test_a_build_cache_that_cannot_be_made_here_gives_way_to_this_machines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_KERNELS_CACHE", str(tmp_path / "here"))
    # the cache of the machine it ran on, under what is no directory here (even root cannot make it)
    run, there = tmp_path / "run", tmp_path / "mount" / "cache"
    run.mkdir()
    (tmp_path / "mount").write_text("")
    (run / CONFIG_FILE).write_text(dump_config(load_config(None, [f"run_dir={run}",
                                                                  f"eval.build.cache_dir={there}"])))
    lines: list[str] = []
    assert load_run_config(run, [], lines.append).eval.build.cache_dir == tmp_path / "here"
    assert lines == [f"eval.build.cache_dir {there} cannot be made on this machine: using its cache "
                     f"{tmp_path / 'here'} instead"]
    lines.clear()   # the user's override, or a recorded cache that can be made here, is kept
    assert load_run_config(run, [f"eval.build.cache_dir={there}"], lines.append).eval.build.cache_dir == there
    (tmp_path / "mount").unlink()
    assert load_run_config(run, [], lines.append).eval.build.cache_dir == there
    assert lines == [] and not there.exists()   # made by the builds, not here


def test_the_warm_start_is_placed_inside_the_run_hard_linked_and_replaced_whole(tmp_path: Path) -> None:
    cached = _adapter(tmp_path / "cache" / "key" / "sft" / "adapter")
    warm = WarmStart(cached, {"train_examples": 3}, reused=True)
    run = tmp_path / "run"
    placed = place_in_run(warm, run)
    assert placed == WarmStart(run / "warm_start" / "adapter", warm.report, reused=True)
    assert sorted(p.name for p in placed.output.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert os.path.samefile(placed.output / "adapter_model.safetensors", cached / "adapter_model.safetensors")
    assert json.loads((run / "warm_start" / "report.json").read_text()) == {"train_examples": 3}
    cfg = start_from(load_config(None, [f"run_dir={run}"]), placed)
    assert cfg.policy.init_adapter == run / "warm_start" / "adapter"
    # placed again (a fresh run in a directory an earlier attempt left): the old copy is replaced
    (run / "warm_start" / "adapter" / "stale.bin").write_bytes(b"")
    place_in_run(warm, run)
    assert not (run / "warm_start" / "adapter" / "stale.bin").exists()
    assert [p.name for p in run.iterdir()] == ["warm_start"]   # no temporary directory left


def test_the_warm_start_is_copied_where_hard_links_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def cross_device(src: str, dst: str) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(warm_start_cache.os, "link", cross_device)
    cached = _adapter(tmp_path / "cache" / "adapter")
    placed = place_in_run(WarmStart(cached, {}, reused=False), tmp_path / "run")
    copy = placed.output / "adapter_model.safetensors"
    assert copy.read_bytes() == b"weights" and not os.path.samefile(copy, cached / "adapter_model.safetensors")
