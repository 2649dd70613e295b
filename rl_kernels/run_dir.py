"""A run directory that moves: resume it at another path, on another machine.

A long run outlives a machine: its directory is copied (tar) to a fresh one, often at another
path, and `--resume NEW_DIR` continues it there. Everything the run writes itself is named
relative to the run directory, but its config.yaml records absolute paths, and some of them lie
inside the old directory (the warm start `train` placed in RUN_DIR/warm_start, for one). Here
such paths are re-rooted: a path under the recorded run_dir is read as the same relative path
under the new one. The build cache is the old machine's, not the run's: where the recorded one
cannot be made here (a mount this machine lacks), this machine's default takes its place (builds
are content-addressed, so an empty cache only rebuilds). A path the run needs (its model, its
initial adapter) that still does not exist is refused here, before any actor starts, rather than
minutes later inside one.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path, PurePath
from typing import Any

import yaml

from rl_kernels.config import Config, ConfigError, apply_override, default_cache_dir, load_config
from rl_kernels.policy.models import ALIASES, KNOWN_MODELS

CONFIG_FILE = "config.yaml"   # the run directory's resolved config, written when the run (re)starts

# Paths a run cannot start without, by dotted config key.
NEEDED_PATHS = ("policy.model", "policy.init_adapter")
# Caches of the machine a run ran on, by dotted config key, and where this machine keeps its own.
MACHINE_CACHES: dict[str, Callable[[], Path]] = {"eval.build.cache_dir": default_cache_dir}


def load_run_config(run: Path, overrides: list[str], say: Callable[[str], None]) -> Config:
    """The config a run continues with: RUN/config.yaml, its paths inside the recorded run
    directory re-rooted under `run`, a missing machine cache replaced by this machine's (each said
    in one line), then `overrides`, then run_dir=run. A needed path that is missing is a
    ConfigError naming the key and what to do."""
    data = _read_config(run / CONFIG_FILE)
    moved = rerooted(data, run)
    caches = local_caches(_applied(data, _items(moved)))
    items = [*_items(moved), *_items(caches), *overrides, f"run_dir={run}"]
    merged = _applied(data, items)
    if moved:
        say(f"run directory moved from {data['run_dir']} to {run}: re-rooted {', '.join(moved)}")
    for key, value in caches.items():
        if _get(merged, key) == value:   # an override of the key has the last word
            say(f"{key} {_get(data, key)} cannot be made on this machine: using its cache {value} instead")
    check_needed_paths(merged, run)
    return load_config(run / CONFIG_FILE, items)


def rerooted(data: dict[str, Any], run: Path) -> dict[str, Any]:
    """Dotted key -> new value, for every value of `data` (a config's mapping) that holds a path
    strictly inside its recorded run_dir, that path moved to the same place under `run` (a list is
    given whole). Empty when the run has not moved, or when the recorded run_dir (`.`, `/`) cannot
    tell its own paths from others."""
    recorded = data.get("run_dir")
    if not isinstance(recorded, str):
        return {}
    old = PurePath(os.path.normpath(recorded))
    if not old.name or Path(recorded).resolve() == run.resolve():
        return {}
    changed = {}
    for key, value in _leaves(data):
        new = _moved(value, old, run)
        if key != "run_dir" and new != value:
            changed[key] = new
    return changed


def local_caches(data: dict[str, Any]) -> dict[str, str]:
    """Dotted key -> this machine's default, for every machine cache `data` names that neither
    exists here nor could be made (a path of the machine the run ran on)."""
    lacking = {}
    for key, default in MACHINE_CACHES.items():
        value = _get(data, key)
        if value is not None and not _can_make(Path(value)) and Path(value) != default():
            lacking[key] = str(default())
    return lacking


def _can_make(path: Path) -> bool:
    """Whether `path` exists, or its nearest existing ancestor is a directory this process may
    create entries in."""
    for p in (path, *path.parents):
        if p.exists():
            return p == path or (p.is_dir() and os.access(p, os.W_OK | os.X_OK))
    return False


def check_needed_paths(data: dict[str, Any], run: Path) -> None:
    """Raise ConfigError for the first path of NEEDED_PATHS that `data` names and that does not
    exist here (a known model name is not a path)."""
    for key in NEEDED_PATHS:
        value = _get(data, key)
        if value is None or (key == "policy.model" and (value in KNOWN_MODELS or value in ALIASES)):
            continue
        if not Path(value).exists():
            raise ConfigError(_missing(key, str(value), run))


def _missing(key: str, value: str, run: Path) -> str:
    """What is wrong with a missing needed path, and what to do about it."""
    if _inside(PurePath(os.path.normpath(value)), PurePath(os.path.normpath(run))) is not None:
        return (f"{key} {value} is missing, though it lies inside the run directory {run}: the copy of the run "
                "directory is incomplete; copy the whole directory again (tar keeps every file)")
    return (f"{key} {value} does not exist on this machine: it lies outside the run directory {run}, so it did "
            f"not travel with it; copy it here and pass {key}=ITS_NEW_PATH with --resume, or resume on a "
            "machine that has it")


def _moved(value: Any, old: PurePath, run: Path) -> Any:
    """`value` with every path string strictly inside `old` moved under `run` (lists and mappings
    walked, anything else as it is)."""
    if isinstance(value, str):
        rel = _inside(PurePath(os.path.normpath(value)), old)
        return str(run / rel) if rel is not None else value
    if isinstance(value, list):
        return [_moved(v, old, run) for v in value]
    if isinstance(value, dict):
        return {k: _moved(v, old, run) for k, v in value.items()}
    return value


def _inside(path: PurePath, root: PurePath) -> PurePath | None:
    """`path` relative to `root` when it lies strictly inside it (the root itself is not inside)."""
    if path == root or not path.is_relative_to(root):
        return None
    return path.relative_to(root)


def _leaves(data: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every non-mapping value by its dotted key (a list is one leaf: overrides cannot index it)."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _get(data: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted key, None when any part is absent."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _items(values: dict[str, Any]) -> list[str]:
    """Dotted key -> value as override items."""
    return [f"{key}={_flow_yaml(value)}" for key, value in values.items()]


def _applied(data: dict[str, Any], items: list[str]) -> dict[str, Any]:
    """A copy of `data` with the override items applied, as load_config will apply them."""
    merged = copy.deepcopy(data)
    for item in items:
        apply_override(merged, item)
    return merged


def _flow_yaml(value: Any) -> str:
    """`value` as one line an override parses back to exactly it (PyYAML's own round trip)."""
    return yaml.safe_dump(value, default_flow_style=True, width=math.inf).removesuffix("\n...\n").strip()


def _read_config(path: Path) -> dict[str, Any]:
    """A run's config.yaml as a mapping."""
    if not path.is_file():
        raise ConfigError(f"{path.parent}: no {CONFIG_FILE} there, so it is not a run directory")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at top level")
    return data
