"""The kept compile caches of a `compile` baseline: what is seeded, listed and stored, and what is not."""

from __future__ import annotations

import json
from pathlib import Path

from rl_kernels.evaluation import compile_cache
from rl_kernels.evaluation.sandbox import _parse


def _scratch_with_caches(root: Path) -> Path:
    scratch = root / "scratch"
    (scratch / "inductor" / "fxgraph" / "ab").mkdir(parents=True)
    (scratch / "inductor" / "fxgraph" / "ab" / "graph").write_bytes(b"compiled graph")
    (scratch / "triton" / "K1").mkdir(parents=True)
    (scratch / "triton" / "K1" / "kernel.cubin").write_bytes(b"\x7fELF cubin")
    (scratch / "candidate.so").write_bytes(b"not a cache file")
    return scratch


def test_listed_files_are_stored_and_seed_the_next_scratch(tmp_path: Path) -> None:
    scratch = _scratch_with_caches(tmp_path)
    listed = compile_cache.manifest(scratch)
    assert sorted(listed) == ["inductor/fxgraph/ab/graph", "triton/K1/kernel.cubin"]
    store = tmp_path / "store"
    assert compile_cache.harvest(store, scratch, listed) == 2
    assert compile_cache.harvest(store, scratch, listed) == 0          # already kept: not rewritten
    nxt = tmp_path / "next"
    nxt.mkdir()
    compile_cache.seed(store, nxt)
    assert (nxt / "inductor" / "fxgraph" / "ab" / "graph").read_bytes() == b"compiled graph"
    assert (nxt / "triton" / "K1" / "kernel.cubin").read_bytes() == b"\x7fELF cubin"
    assert not list(store.rglob(".part-*"))


def test_a_file_changed_after_the_listing_is_not_kept(tmp_path: Path) -> None:
    scratch = _scratch_with_caches(tmp_path)
    listed = compile_cache.manifest(scratch)
    (scratch / "inductor" / "fxgraph" / "ab" / "graph").write_bytes(b"poisoned by the candidate")
    (scratch / "triton" / "K2").mkdir()
    (scratch / "triton" / "K2" / "new.cubin").write_bytes(b"written after the listing")
    store = tmp_path / "store"
    assert compile_cache.harvest(store, scratch, listed) == 1
    assert not (store / "inductor").exists()
    assert not (store / "triton" / "K2").exists()
    assert (store / "triton" / "K1" / "kernel.cubin").is_file()


def test_paths_outside_the_cache_dirs_are_never_stored(tmp_path: Path) -> None:
    scratch = _scratch_with_caches(tmp_path)
    digest = compile_cache.manifest(scratch)["triton/K1/kernel.cubin"]
    forged = {"../../escape": digest, "candidate.so": digest, "/etc/passwd": digest,
              "triton/../candidate.so": digest}
    store = tmp_path / "store"
    assert compile_cache.harvest(store, scratch, forged) == 0
    assert not store.exists() and not (tmp_path / "escape").exists()


def test_only_a_listing_from_before_the_candidate_loaded_counts() -> None:
    early = [json.dumps({"phase": "setup"}), json.dumps({"compiled": {"triton/a": "1"}}),
             json.dumps({"phase": "load"}), json.dumps({"compiled": {"triton/b": "2"}})]
    assert _parse(early)[2] == {"triton/a": "1"}
    forged = [json.dumps({"phase": "setup"}), json.dumps({"phase": "load"}),
              json.dumps({"compiled": {"triton/b": "2"}})]
    assert _parse(forged)[2] == {}
    assert _parse(["not json", json.dumps({"final": True})])[2] == {}
