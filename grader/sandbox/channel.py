"""The one channel between a judge and its subject: length-prefixed frames of JSON plus raw tensor bytes.

Nothing that crosses is ever unpickled or evaluated. A frame is a 4-byte big-endian header length, a UTF-8 JSON
header, then the raw bytes of each blob the header lists. Tensors travel as ``{"$tensor": i, "dtype", "shape"}``
with their bytes in blob ``i``; dtypes come from a fixed list and every length is checked against the shape.
Reading is bounded: a header, a blob or a whole frame over its cap is refused before it is read into memory, so a
subject that floods the channel fails its probe and the judge's memory stays flat.
"""

from __future__ import annotations

import json
import math
import select
import socket
import struct
import time
from dataclasses import dataclass

HEADER_CAP = 4 << 20
FRAME_CAP = 256 << 20
NODE_CAP = 1_000_000
STRING_CAP = 1 << 20
# dtype name -> bytes per element; names are torch's (``str(torch.float32)`` without the prefix).
DTYPES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}


class ChannelError(Exception):
    """The other side sent something that is not a well-formed frame within the caps (or nothing at all)."""


class ChannelTimeout(ChannelError):
    """No complete frame arrived before the deadline."""


class SendTimeout(ChannelError):
    """The other side did not take a whole frame before the deadline (it stopped reading)."""


@dataclass(frozen=True)
class Limits:
    frame_bytes: int = FRAME_CAP
    header_bytes: int = HEADER_CAP
    nodes: int = NODE_CAP


# --- encoding -------------------------------------------------------------------------------------------------


def encode(value) -> tuple[object, list[bytes]]:
    """A JSON-ready form of ``value`` and the blobs it refers to. Tensors and numpy arrays become blobs; dtypes
    become their names; tuples become lists; non-finite floats are spelled out."""
    blobs: list[bytes] = []
    return _encode(value, blobs), blobs


def _encode(value, blobs: list[bytes]):
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v, blobs) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("only str keys cross the channel")
        if any(k.startswith("$") for k in value):
            raise TypeError("keys starting with '$' are reserved by the channel")
        return {k: _encode(v, blobs) for k, v in value.items()}
    module = type(value).__module__
    if module.startswith("torch"):
        import torch

        if isinstance(value, torch.dtype):
            return str(value).removeprefix("torch.")
        if isinstance(value, torch.Tensor):
            return _encode_tensor(value, blobs)
        if isinstance(value, torch.Size):
            return list(value)
    if module == "numpy" or module.startswith("numpy."):
        import numpy

        if isinstance(value, numpy.ndarray):
            import torch

            return _encode_tensor(torch.from_numpy(numpy.ascontiguousarray(value)), blobs)
        if isinstance(value, numpy.generic):
            return _encode(value.item(), blobs)
    raise TypeError(f"a {type(value).__name__} cannot cross the channel")


def _encode_tensor(tensor, blobs: list[bytes]) -> dict:
    import torch

    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise TypeError(f"tensor dtype {dtype} cannot cross the channel")
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
    blobs.append(raw.numpy().tobytes())
    return {"$tensor": len(blobs) - 1, "dtype": dtype, "shape": list(tensor.shape)}


# --- decoding -------------------------------------------------------------------------------------------------


def decode(obj, blobs: list[bytes], limits: Limits = Limits()):
    """The value ``encode`` made, rebuilt from data only; anything malformed raises ChannelError."""
    budget = [limits.nodes]
    used: set[int] = set()
    return _decode(obj, blobs, budget, used)


def _decode(obj, blobs, budget, used):
    budget[0] -= 1
    if budget[0] < 0:
        raise ChannelError(f"more than {NODE_CAP} values in one frame")
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, str):
        if len(obj) > STRING_CAP:
            raise ChannelError(f"a string of {len(obj)} characters (cap {STRING_CAP})")
        return obj
    if isinstance(obj, list):
        return [_decode(v, blobs, budget, used) for v in obj]
    if not isinstance(obj, dict):
        raise ChannelError(f"unexpected JSON value {type(obj).__name__}")
    if "$tensor" in obj:
        return _decode_tensor(obj, blobs, used)
    if "$float" in obj:
        text = obj["$float"]
        if text not in ("nan", "inf", "-inf") or len(obj) != 1:
            raise ChannelError(f"bad non-finite float {text!r}")
        return float(text)
    if any(k.startswith("$") for k in obj):
        raise ChannelError(f"unknown channel marker in {sorted(obj)[:3]}")
    return {k: _decode(v, blobs, budget, used) for k, v in obj.items()}


def _decode_tensor(obj: dict, blobs: list[bytes], used: set[int]):
    import torch

    index, dtype, shape = obj.get("$tensor"), obj.get("dtype"), obj.get("shape")
    if set(obj) != {"$tensor", "dtype", "shape"} or not isinstance(index, int) or dtype not in DTYPES:
        raise ChannelError(f"malformed tensor record {str(obj)[:200]}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape) or len(shape) > 16:
        raise ChannelError(f"malformed tensor shape {str(shape)[:200]}")
    if not 0 <= index < len(blobs) or index in used:
        raise ChannelError(f"tensor refers to blob {index} (frame has {len(blobs)}, each used once)")
    used.add(index)
    raw = blobs[index]
    numel = math.prod(shape)
    if len(raw) != numel * DTYPES[dtype]:
        raise ChannelError(f"tensor of shape {shape} and dtype {dtype} needs {numel * DTYPES[dtype]} bytes, "
                           f"got {len(raw)}")
    if numel == 0:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)


# --- framing --------------------------------------------------------------------------------------------------


def send_frame(sock: socket.socket, header: dict, blobs: list[bytes] = (), deadline: float | None = None) -> None:
    """Send one frame; with a ``deadline`` (a ``time.monotonic()`` value) raise ``SendTimeout`` when the other side
    has not taken all of it by then, instead of blocking for as long as it does not read."""
    header = dict(header, blobs=[len(b) for b in blobs])
    data = json.dumps(header, allow_nan=False).encode()
    for piece in (struct.pack(">I", len(data)) + data, *blobs):
        if deadline is None:
            sock.sendall(piece)
        else:
            _send_by(sock, memoryview(piece), deadline)


def _send_by(sock: socket.socket, data: memoryview, deadline: float) -> None:
    while data:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([], [sock], [], wait)[1]:
            raise SendTimeout("the other side took no more of the frame before the deadline")
        try:
            data = data[sock.send(data[:1 << 20], socket.MSG_DONTWAIT):]
        except BlockingIOError:  # the room select saw was taken by a smaller write first
            continue


def send_value(sock: socket.socket, header: dict, value, deadline: float | None = None) -> None:
    obj, blobs = encode(value)
    send_frame(sock, dict(header, value=obj), blobs, deadline)


def receive_frame(sock: socket.socket, deadline: float | None = None,
                  limits: Limits = Limits()) -> tuple[dict, list[bytes]]:
    """One frame, read in bounded pieces; ``deadline`` is a ``time.monotonic()`` value (None: wait for ever)."""
    (length,) = struct.unpack(">I", _read_exactly(sock, 4, deadline))
    if length > limits.header_bytes:
        raise ChannelError(f"a frame header of {length} bytes (cap {limits.header_bytes})")
    try:
        header = json.loads(_read_exactly(sock, length, deadline))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ChannelError(f"a frame header that is not JSON: {exc}") from None
    sizes = header.get("blobs") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(n, int) and n >= 0 for n in sizes):
        raise ChannelError("a frame header without a valid blob list")
    if sum(sizes) + length > limits.frame_bytes:
        raise ChannelError(f"a frame of {sum(sizes) + length} bytes (cap {limits.frame_bytes})")
    return header, [_read_exactly(sock, n, deadline) for n in sizes]


def receive_value(sock: socket.socket, deadline: float | None = None, limits: Limits = Limits()):
    header, blobs = receive_frame(sock, deadline, limits)
    return header, decode(header.get("value"), blobs, limits)


def _read_exactly(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([sock], [], [], wait)[0]:
                raise ChannelTimeout("no answer before the deadline")
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ChannelError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
