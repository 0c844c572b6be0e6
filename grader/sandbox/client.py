"""The judge's handle on a subject: call a probe, get data back, or an exception that says what went wrong.

Used by the hidden tests (through the ``subject`` fixture of ``rubrics/conftest.py``), in the judge process, which
never imports a candidate's code. A probe that raised comes back as ``ProbeRaised``; a subject that died, sent
something malformed or over the caps is ``SubjectBroken``; one that did not answer in time is ``ProbeTimeout``.
None of them is a skip: only the judge decides that a check did not run. After a break or a time-out the subject
is killed and the next call starts a fresh one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from functools import cache

from grader.sandbox import zygote
from grader.sandbox.channel import ChannelError, ChannelTimeout, Limits, decode, encode, receive_frame, send_frame
from grader.sandbox.contain import kill_contained

DEFAULT_PROBE_S = 300.0
MAX_STARTS = 20


class ProbeRaised(Exception):
    """The probe (or the candidate's code under it) raised; ``type`` is the exception class's name."""

    def __init__(self, probe: str, error: dict) -> None:
        self.probe = probe
        self.type = str(error.get("type", "?"))[:200]
        self.module = str(error.get("module", "?"))[:200]
        self.message = str(error.get("message", ""))[:4000]
        self.remote_traceback = str(error.get("traceback", ""))[-8000:]
        super().__init__(f"probe {probe} raised {self.type}: {self.message}")


class SubjectBroken(Exception):
    """The subject died, or answered with something that is not a well-formed frame within the caps."""


class ProbeTimeout(Exception):
    """The probe did not answer within its time (or the candidate's time limit was already reached)."""


def deadline_left() -> float:
    """Seconds until the candidate's time limit (``GRADER_DEADLINE``, epoch seconds); infinite when unset."""
    deadline = os.environ.get("GRADER_DEADLINE")
    return float("inf") if not deadline else float(deadline) - time.time()


class Subject:
    def __init__(self, name: str, spec: dict, control: socket.socket) -> None:
        self.name, self.spec, self.control = name, spec, control
        self.pid: int | None = None
        self.sock: socket.socket | None = None
        self.starts = 0

    def call(self, probe: str, /, *, timeout: float | None = None, max_bytes: int | None = None, **args):
        """Run ``probe`` (``module.function`` of the staged probes) in the subject with ``args``; its value."""
        value, _ = self.timed_call(probe, timeout=timeout, max_bytes=max_bytes, **args)
        return value

    def timed_call(self, probe: str, /, *, timeout: float | None = None, max_bytes: int | None = None, **args):
        """As ``call``, and the wall-clock seconds the call took as the judge measured them."""
        budget = min(timeout or DEFAULT_PROBE_S, deadline_left())
        if budget <= 0:
            raise ProbeTimeout(f"probe {probe} not started: the candidate's time limit was reached")
        sock = self._channel()
        obj, blobs = encode(args)
        limits = Limits(frame_bytes=max_bytes) if max_bytes else Limits()
        started = time.monotonic()
        try:
            send_frame(sock, {"probe": probe, "value": obj}, blobs)
            header, reply = receive_frame(sock, started + budget, limits)
            elapsed = time.monotonic() - started
            if self.name == "candidate":
                note_lines_ran(header.get("ran"))
            if header.get("ok") is True:
                return decode(header.get("value"), reply, limits), elapsed
            if header.get("ok") is False and isinstance(header.get("error"), dict):
                raise ProbeRaised(probe, header["error"])
            raise ChannelError("an answer that is neither a value nor an error")
        except ChannelTimeout:
            self.kill()
            raise ProbeTimeout(f"probe {probe} gave no answer within {budget:.0f} s") from None
        except (ChannelError, OSError) as exc:
            self.kill()
            raise SubjectBroken(f"probe {probe}: {exc}{self._log_tail()}") from None

    def outcome(self, probe: str, /, **args) -> dict:
        """``{"returned": value}``, or ``{"raised": type name, "message": text}`` when the probe raised."""
        try:
            return {"returned": self.call(probe, **args)}
        except ProbeRaised as exc:
            return {"raised": exc.type, "message": exc.message}

    def _channel(self) -> socket.socket:
        if self.sock is None:
            if self.starts >= MAX_STARTS:
                raise SubjectBroken(f"the {self.name} subject was restarted {MAX_STARTS} times; not again")
            self.starts += 1
            self.pid, self.sock = zygote.spawn(self.control, self.spec)
        return self.sock

    def _log_tail(self) -> str:
        try:
            with open(self.spec["log"], "rb") as log:
                log.seek(max(0, os.path.getsize(self.spec["log"]) - 600))
                tail = log.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f" (subject log ends: {tail[-600:]})" if tail else ""

    def kill(self) -> None:
        """End this subject and everything it started; the next call starts a fresh one."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            kill_contained(self.spec.get("box"))
            self.pid = None


# The patch's added lines that ran in the candidate's subject since the current test started (path -> lines),
# for the evidence plugin to record with the test; None where this judge run traces no lines.
LINES_RAN: dict[str, set[int]] = {}


@cache
def added_lines() -> dict[str, tuple[str, frozenset[int]]]:
    """The files the subject traces, as its code objects name them: (the path in the diff, the added lines)."""
    path = os.environ.get("GRADER_ADDED_LINES")
    if not path:
        return {}
    with open(path) as handle:
        return {name: (entry["path"], frozenset(entry["lines"])) for name, entry in json.load(handle).items()}


def note_lines_ran(reported) -> None:
    """Add what a subject says ran to ``LINES_RAN``, keeping only files and added lines the judge gave it: the
    report is the subject's word, so anything else in it is dropped. It feeds the scorecard only."""
    if not isinstance(reported, dict):
        return
    known = added_lines()
    for name, lines in reported.items():
        if name not in known or not isinstance(lines, list):
            continue
        path, allowed = known[name]
        LINES_RAN.setdefault(path, set()).update(n for n in lines if type(n) is int and n in allowed)


@cache
def _control() -> socket.socket:
    fd = os.environ.get("GRADER_ZYGOTE_FD")
    if not fd:
        raise RuntimeError("no zygote: hidden tests run only in a judge process started by the grader")
    return socket.socket(fileno=int(fd))


_SUBJECTS: dict[str, Subject] = {}


def subject(name: str = "candidate") -> Subject:
    """The named subject of this judge run ("candidate": the patched tree; "base": the unpatched base)."""
    if name not in _SUBJECTS:
        with open(os.environ["GRADER_SUBJECTS"]) as specs:
            spec = json.load(specs).get(name)
        if spec is None:
            raise RuntimeError(f"this judge run has no {name!r} subject")
        _SUBJECTS[name] = Subject(name, spec, _control())
    return _SUBJECTS[name]


def end_all() -> None:
    """Kill every subject this judge started (at the end of its run)."""
    for handle in _SUBJECTS.values():
        handle.kill()
