"""The subject: the only process that imports a candidate's vLLM. It answers probe calls with plain observations.

A probe is a function in one of the task's probe modules (``rubrics/<task>/probes/``, staged with the shared ones
from ``rubrics/shared_probes/`` into one read-only folder). The subject calls it with the judge's arguments and
sends back what it returned, as data (see ``grader.sandbox.channel``). Whatever it raises, ``pytest.skip``,
``SystemExit`` and ``KeyboardInterrupt`` included, is sent back as an error record: deciding what an error means,
and that a check "did not run", is the judge's alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import random
import socket
import sys
import traceback

from grader.sandbox.channel import ChannelError, receive_value, send_frame, send_value
from grader.sandbox.linetrace import LineTrace

MESSAGE_CAP = 4000
TRACEBACK_CAP = 8000


def describe_exception(exc: BaseException) -> dict:
    kind = type(exc)
    return {"type": kind.__name__, "module": kind.__module__, "message": str(exc)[:MESSAGE_CAP],
            "traceback": "".join(traceback.format_exception(exc))[-TRACEBACK_CAP:]}


def reseed() -> None:
    """Each probe call starts from the same random state, whatever ran before it in this process."""
    random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)


def resolve(name: str):
    module_name, _, function = name.rpartition(".")
    if not module_name or not function.isidentifier() or function.startswith("_"):
        raise ValueError(f"not a probe name: {name!r} (want module.function)")
    module = importlib.import_module(module_name)
    found = getattr(module, function)
    if not callable(found):
        raise TypeError(f"probe {name} is not callable")
    return found


def answer(sock: socket.socket, header: dict, args: dict, trace: LineTrace | None = None) -> None:
    """Call the probe and send what came of it; with ``trace``, also the patch's lines that ran (``ran``)."""
    reseed()
    if trace is not None:
        trace.start()
    try:
        value = resolve(header["probe"])(**args)
    except BaseException as exc:  # noqa: BLE001 - every outcome of candidate code is reported, none decided here
        send_frame(sock, {"ok": False, "error": describe_exception(exc), **lines_ran(trace)})
        return
    ran = lines_ran(trace)
    try:
        send_value(sock, {"ok": True, **ran}, value)
    except (TypeError, ValueError) as exc:
        send_frame(sock, {"ok": False, "error": describe_exception(exc), "unencodable": True, **ran})


def lines_ran(trace: LineTrace | None) -> dict:
    """The header field for the lines a traced call ran (none without tracing)."""
    return {"ran": trace.stop()} if trace is not None else {}


def bound_gpu_allocator(limit_bytes: int | None) -> None:
    """Cap torch's CUDA caching allocator at ``limit_bytes`` before any candidate code runs (an honest subject then
    fails its own allocation with an out-of-memory error rather than being ended from outside). Candidate code in
    this process can lift it: the bound that holds is the judge's ``MemoryWatch``."""
    if not limit_bytes:
        return
    try:
        import torch

        if torch.cuda.is_available():
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total), 0)
    except Exception as exc:  # noqa: BLE001 - a subject without a usable CUDA still serves; the watch still holds
        print(f"grader: no allocator bound in this subject: {type(exc).__name__}: {exc}", file=sys.stderr)


def setup_error() -> dict | None:
    """Import ``subject_setup`` (the stand-ins every subject needs), if the staged probes have one."""
    try:
        if importlib.util.find_spec("subject_setup") is not None:
            importlib.import_module("subject_setup")
    except BaseException as exc:  # noqa: BLE001 - reported on every probe call instead
        return describe_exception(exc)
    return None


def serve(sock: socket.socket, added_lines: dict[str, list[int]] | None = None) -> None:
    """Answer probe calls until the judge closes the channel; with ``added_lines`` (file -> the patch's line
    numbers), each answer says which of them ran."""
    trace = LineTrace(added_lines) if added_lines else None
    failed_setup = setup_error()
    while True:
        try:
            header, args = receive_value(sock)
        except (ChannelError, OSError):
            os._exit(0)
        if not isinstance(args, dict):
            send_frame(sock, {"ok": False, "error": {"type": "TypeError", "module": "builtins",
                                                     "message": "probe arguments must be a mapping",
                                                     "traceback": ""}})
            continue
        if failed_setup:
            send_frame(sock, {"ok": False, "error": failed_setup, "setup": True})
            continue
        answer(sock, header, args, trace)
