"""Input sets in memory both the judge and the runner map: the judge writes inputs and reads outputs
in place, the runner calls the candidate on them, and no tensor is ever serialised.

On cpu every storage of a set is copied once into a memfd (sent to the runner as a file
descriptor; memfds need no /dev/shm, which the sandbox keeps small).  On cuda the storages stay
where the judge allocated them and the runner opens them through CUDA IPC handles.  Views (the
hgemm inputs inside their NaN guards, B's column-major alias) keep their offsets and strides, so a
write past an output's end lands in the judge's guard region exactly as it would in one process.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from rl_kernels.evaluation.problems import InputSet


@dataclass
class SharedSets:
    """The judge's side: its sets (now backed by shared memory) and what the runner needs to map them."""

    sets: list[InputSet]
    descriptor: dict[str, Any]
    fds: list[int] = field(default_factory=list)   # cpu: memfds to send with the descriptor
    _keep: list[Any] = field(default_factory=list)  # mappings that must live as long as the sets

    def close_fds(self) -> None:
        """After the runner has its copies of the descriptors (the mappings stay)."""
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return dt


def _view(storage: torch.UntypedStorage, offset: int, shape: list[int], stride: list[int], dtype: torch.dtype,
          device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape, stride)


class _Exporter:
    """Collects the storages of the sets it is given, each once; with `copy`, into new memory (cuda
    storages are otherwise shared where they are; cpu ones always move into a memfd)."""

    def __init__(self, device: str, copy: bool = False):
        self.device = device
        self.copy = copy
        self.storages: list[Any] = []
        self.fds: list[int] = []
        self.keep: list[Any] = []
        self.by_ptr: dict[int, tuple[int, torch.UntypedStorage]] = {}

    def storage(self, t: torch.Tensor) -> tuple[int, torch.UntypedStorage]:
        """Index of t's storage in the export, and the shared storage the judge uses from now on."""
        old = t.untyped_storage()
        key = old.data_ptr()
        if key in self.by_ptr:
            return self.by_ptr[key]
        if t.is_cuda:
            new = old
            if self.copy:
                new = torch.empty(old.nbytes(), dtype=torch.uint8, device=t.device).untyped_storage()
                new.copy_(old)
            self.storages.append({"cuda": new._share_cuda_()})
        else:
            nbytes = max(old.nbytes(), 1)
            fd = os.memfd_create("rl-kernels-set", os.MFD_CLOEXEC)
            os.ftruncate(fd, nbytes)
            mapping = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
            buf = torch.frombuffer(mapping, dtype=torch.uint8)
            buf[: old.nbytes()].copy_(torch.empty(0, dtype=torch.uint8).set_(old))
            new = buf.untyped_storage()
            self.keep.append(mapping)
            self.storages.append({"fd": len(self.fds), "nbytes": nbytes})
            self.fds.append(fd)
        self.by_ptr[key] = (len(self.storages) - 1, new)
        return self.by_ptr[key]

    def tensors(self, items: list[Any]) -> tuple[list[Any], list[Any]]:
        """(the judge's new items, their descriptions); non-tensors travel as values."""
        ours, described = [], []
        for x in items:
            if isinstance(x, torch.Tensor):
                index, storage = self.storage(x)
                view = _view(storage, x.storage_offset(), list(x.shape), list(x.stride()), x.dtype, x.device)
                ours.append(view)
                described.append(("t", index, x.storage_offset(), list(x.shape), list(x.stride()), str(x.dtype)))
            else:
                ours.append(x)
                described.append(("v", x))
        return ours, described


def share(sets: list[InputSet], device: str) -> SharedSets:
    """Moves `sets` into shared memory (in place: their tensors are replaced by shared views)."""
    ex = _Exporter(device)
    described = []
    for s in sets:
        s.args, args = ex.tensors(s.args)
        s.outputs, outs = ex.tensors(s.outputs)
        s.guards, _ = ex.tensors(s.guards)
        described.append({"args": args, "outputs": outs})
    if device.startswith("cuda"):
        torch.cuda.synchronize()   # the runner's context must see every value written so far
    return SharedSets(sets, {"storages": ex.storages, "sets": described}, ex.fds, ex.keep)


def replicate(template: InputSet, copies: int, device: str) -> SharedSets:
    """`copies` sets laid out exactly like `template` (views, guard regions and their fill included)
    in fresh shared memory, each a byte copy of it: a pool without drawing every set from scratch
    (the caller refreshes the values before they are used)."""
    ex = _Exporter(device, copy=True)
    sets, described = [], []
    for _ in range(copies):
        ex.by_ptr = {}   # a new storage for every copy
        args, d_args = ex.tensors(template.args)
        outs, d_outs = ex.tensors(template.outputs)
        guards, _ = ex.tensors(template.guards)
        sets.append(InputSet(args, outs, guards))
        described.append({"args": d_args, "outputs": d_outs})
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return SharedSets(sets, {"storages": ex.storages, "sets": described}, ex.fds, ex.keep)


@dataclass
class MappedSet:
    """The runner's side of one set: the candidate's arguments and the judge's output buffers."""

    args: list[Any]
    outputs: list[torch.Tensor]


def attach(descriptor: dict[str, Any], fds: list[int], device: str) -> tuple[list[MappedSet], list[Any]]:
    """Maps what `share` exported; returns the sets and the mappings to keep alive."""
    dev = torch.device(device)
    storages: list[torch.UntypedStorage] = []
    keep: list[Any] = []
    for st in descriptor["storages"]:
        if "cuda" in st:
            storages.append(torch.UntypedStorage._new_shared_cuda(*st["cuda"]))
        else:
            mapping = mmap.mmap(fds[st["fd"]], st["nbytes"])
            keep.append(mapping)
            storages.append(torch.frombuffer(mapping, dtype=torch.uint8).untyped_storage())
    for fd in fds:
        os.close(fd)

    def build(items: list[Any]) -> list[Any]:
        out = []
        for item in items:
            if item[0] == "t":
                _, index, offset, shape, stride, dtype = item
                out.append(_view(storages[index], offset, shape, stride, _dtype(dtype), dev))
            else:
                out.append(item[1])
        return out

    return [MappedSet(build(d["args"]), build(d["outputs"])) for d in descriptor["sets"]], keep
