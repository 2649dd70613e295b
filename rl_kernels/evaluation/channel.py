"""The judge's line to the runner: framed messages over one AF_UNIX socket pair.

The two directions are deliberately asymmetric.  The judge (trusted) sends pickles: the runner may
unpickle whatever the judge wrote.  The runner (candidate code shares its process) sends JSON
only: the judge never unpickles anything the candidate could have written, and every number it
reads is parsed, typed data.  File descriptors (the shared input sets on cpu) travel beside a
judge message as SCM_RIGHTS.
"""

from __future__ import annotations

import json
import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct("!I")
MAX_REPORT_BYTES = 8 << 20   # a runner report longer than this is an attack or a bug, not data


class ChannelClosed(Exception):
    """The other side went away (the runner died, or the judge did)."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other side closed the channel")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def send_order(sock: socket.socket, msg: dict[str, Any], fds: list[int] = ()) -> None:
    """Judge -> runner: a pickled message, with file descriptors attached when given."""
    body = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    header = _HEADER.pack(len(body))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(body)


def recv_order(sock: socket.socket, max_fds: int = 256) -> tuple[dict[str, Any], list[int]]:
    """Runner side of `send_order`: the message and the descriptors that came with it."""
    data, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, max_fds)
    if not data:
        raise ChannelClosed("the judge closed the channel")
    header = data if len(data) == _HEADER.size else data + _recv_exact(sock, _HEADER.size - len(data))
    (n,) = _HEADER.unpack(header)
    return pickle.loads(_recv_exact(sock, n)), list(fds)


def send_report(sock: socket.socket, msg: dict[str, Any]) -> None:
    """Runner -> judge: JSON only."""
    body = json.dumps(msg).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def recv_report(sock: socket.socket) -> dict[str, Any]:
    """Judge side of `send_report`: a JSON object of bounded size, or ChannelClosed."""
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if n > MAX_REPORT_BYTES:
        raise ChannelClosed(f"the runner sent a {n}-byte report (limit {MAX_REPORT_BYTES})")
    msg = json.loads(_recv_exact(sock, n))
    if not isinstance(msg, dict):
        raise ChannelClosed("the runner sent something that is not a JSON object")
    return msg
