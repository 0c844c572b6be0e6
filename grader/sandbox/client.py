"""The judge's handle on a subject: call a probe, get data back, or an exception that says what went wrong.

Used by the hidden tests (through the ``subject`` fixture of ``rubrics/conftest.py``), in the judge process, which
never imports a candidate's code. A probe that raised comes back as ``ProbeRaised``; a subject that died, sent
something malformed or over the caps is ``SubjectBroken``; a candidate's call over its time budget, where a
control (the base or the reference fix) finished the same call, is ``ProbeOverBudget``, a failed check (see
``grader.sandbox.budget``); a call that did not answer where no control finished it either is ``ProbeTimeout``.
None of them is a skip: only the judge decides that a check did not run. After a break or a time-out the subject
is killed and the next call starts a fresh one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from contextlib import contextmanager
from functools import cache

from grader.sandbox import protocol, zygote
from grader.sandbox.budget import Budget, CallCounter, CallTimes
from grader.sandbox.channel import ChannelError, ChannelTimeout, Limits, decode, encode, receive_frame, send_frame
from grader.sandbox.contain import end_subject
from grader.sandbox.protocol import SubjectSpec, load_subjects
from grader.sandbox.watchdog import watch_for

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
    """The probe did not answer within its time (or the candidate's time limit was already reached), and no
    control finished the same call: nothing is known about the candidate from it."""


class ProbeOverBudget(ProbeTimeout):
    """The candidate did not answer within the call's budget, and the base or the reference fix answered the same
    call well within it: a failed check."""


@contextmanager
def analysis_clock_paused():
    """The judge's analysis budget (an ITIMER_REAL of ``rubrics/conftest.py``) stopped while the judge waits on a
    subject: a probe call is held to its own budget, and is not the judge's analysis of the candidate's text."""
    remaining, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if remaining > 0:
            signal.setitimer(signal.ITIMER_REAL, remaining, interval)


# Where the deadline counts from when no judge set its start (a test calling the client directly): this import.
IMPORTED_AT = time.monotonic()


def deadline_left() -> float:
    """Seconds until the candidate's time limit (``GRADER_DEADLINE``: seconds from the judge's start, which the
    judge notes on its monotonic clock as ``GRADER_JUDGE_STARTED``), on that clock, which no step of the wall clock
    moves; infinite when unset."""
    deadline = os.environ.get(protocol.DEADLINE)
    if not deadline:
        return float("inf")
    started = float(os.environ.get(protocol.JUDGE_STARTED) or IMPORTED_AT)
    return float(deadline) - (time.monotonic() - started)


def deadline_charged() -> bool:
    """Whether the time limit is the candidate's own budget, from the controls' times on this machine: then a
    call it cuts short, where a control finished the call, is the candidate's failure."""
    return os.environ.get(protocol.DEADLINE_CHARGED) == "1"


class Subject:
    def __init__(self, name: str, spec: SubjectSpec, control: socket.socket) -> None:
        self.name, self.spec, self.control = name, spec, control
        # Contain's own view of the box, as its functions that end and watch a subject read it.
        self.box = spec.box.to_json() if spec.box else None
        self.pid: int | None = None
        self.sock: socket.socket | None = None
        self.starts = 0
        self.answered = False
        # Why this subject is taken as never getting ready (a fresh start over its budget before it ever answered).
        self.not_ready: str | None = None
        self.watch = None
        # The subject's private log, held open by the judge: readable after the subject (and its home) is gone.
        self.log_fd: int | None = None

    def call(self, probe: str, /, *, timeout: float | None = None, max_bytes: int | None = None, **args):
        """Run ``probe`` (``module.function`` of the staged probes) in the subject with ``args``; its value."""
        value, _ = self.timed_call(probe, timeout=timeout, max_bytes=max_bytes, **args)
        return value

    def timed_call(self, probe: str, /, *, timeout: float | None = None, max_bytes: int | None = None, **args):
        """As ``call``, and the wall-clock seconds the call took as the judge measured them. The candidate's calls
        are held to their budgets; in a calibration run they are timed, and timed again on the base."""
        with analysis_clock_paused():
            return self._held_call(probe, timeout, max_bytes, args)

    def _held_call(self, probe: str, timeout: float | None, max_bytes: int | None, args: dict):
        if self.name != "candidate":
            return self._timed_call(probe, timeout, max_bytes, args, None)
        key = _COUNTER.next_key(probe)
        fresh = self.sock is None
        if _MEASURED is not None:
            return _measure(self, key, fresh, probe, timeout, max_bytes, args)
        budget = _BUDGETS.budget(key, fresh) if _BUDGETS is not None else None
        if budget is not None and fresh and self.not_ready:
            raise ProbeOverBudget(f"probe {probe} not started: {self.not_ready}")
        return self._timed_call(probe, timeout, max_bytes, args, budget)

    def _timed_call(self, probe: str, timeout: float | None, max_bytes: int | None, args: dict,
                    budget: Budget | None):
        limit = min(timeout or DEFAULT_PROBE_S, budget.seconds) if budget else (timeout or DEFAULT_PROBE_S)
        left = deadline_left()
        # Over budget is the candidate's failure only where a control answered within the limit that applied: the
        # call's budget, or the candidate's whole time where that is its own budget (time it burned before this
        # call, answering late inside each earlier call's budget or sleeping between calls, is charged to it).
        controls_finished = budget is not None and min(budget.controls.values()) <= limit
        held_to_budget = controls_finished and (limit <= left or deadline_charged())
        if min(limit, left) <= 0:
            if held_to_budget:
                raise ProbeOverBudget(f"probe {probe} not started: the candidate had used its whole time budget, "
                                      f"where {budget.explain()} on this machine")
            raise ProbeTimeout(f"probe {probe} not started: the candidate's time limit was reached")
        cut_by_deadline = left < limit
        limit = min(limit, left)
        fresh = self.sock is None
        sock = self._channel()
        obj, blobs = encode(args)
        limits = Limits(frame_bytes=max_bytes) if max_bytes else Limits()
        started = time.monotonic()
        try:
            # A subject that does not read its request within the probe's time is broken, not waited for.
            send_frame(sock, {"probe": probe, "value": obj}, blobs, deadline=started + limit)
            header, reply = receive_frame(sock, started + limit, limits)
            elapsed = time.monotonic() - started
            self.answered = True
            if self.name == "candidate":
                note_lines_ran(header.get("ran"))
            if header.get("ok") is True:
                return decode(header.get("value"), reply, limits), elapsed
            if header.get("ok") is False and isinstance(header.get("error"), dict):
                raise ProbeRaised(probe, header["error"])
            raise ChannelError("an answer that is neither a value nor an error")
        except ChannelTimeout:
            self.kill()
            if held_to_budget:
                spent = "the rest of the candidate's whole time budget" if cut_by_deadline else "its budget"
                why = (f"probe {probe} gave no answer within {spent} ({limit:.1f} s), where "
                       f"{budget.explain()} on this machine")
                if fresh and not self.answered:
                    self.not_ready = f"the candidate's subject never got ready: {why}"
                raise ProbeOverBudget(why) from None
            raise ProbeTimeout(f"probe {probe} gave no answer within {limit:.0f} s") from None
        except (ChannelError, OSError) as exc:
            over_bound = self.watch.reason if self.watch is not None else None
            tail = self._log_tail()  # before the kill, which closes the judge's hold on the private log
            self.kill()
            raise SubjectBroken(f"probe {probe}: {over_bound or exc}{tail}") from None

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
            self.watch = watch_for(self.pid, self.box, protocol.gpu_asked())
            self.log_fd = self._open_private_log()
        return self.sock

    def _open_private_log(self, wait_s: float = 5.0) -> int | None:
        """The subject's private log (``zygote.private_log``), opened through its mount namespace as soon as it
        has contained itself and made it; None where it has none or it did not appear in time."""
        inside = zygote.private_log(self.box)
        if not inside or self.pid is None:
            return None
        path, until = f"/proc/{self.pid}/root{inside}", time.monotonic() + wait_s
        while True:
            try:
                return os.open(path, os.O_RDONLY)
            except OSError:
                if time.monotonic() > until:
                    return None
                time.sleep(0.01)

    def _log_tail(self) -> str:
        """The end of what the subject wrote: its private log (read through its mount namespace while it lives),
        else the start-up log in the judge's folder."""
        for source in [self.log_fd, self.spec.log]:
            if source is None:
                continue
            try:
                with open(os.dup(source) if isinstance(source, int) else source, "rb") as log:
                    size = os.fstat(log.fileno()).st_size
                    log.seek(max(0, size - 600))
                    tail = log.read(600).decode("utf-8", "replace").strip()
            except OSError:
                continue
            if tail:
                return f" (subject log ends: {tail[-600:]})"
        return ""

    def kill(self) -> None:
        """End this subject and everything it started; the next call starts a fresh one."""
        if self.watch is not None:
            self.watch.stop()
            self.watch = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid is not None:
            end_subject(self.pid, self.box)
            self.pid = None
        if self.log_fd is not None:
            os.close(self.log_fd)
            self.log_fd = None


# The patch's added lines that ran in the candidate's subject since the current test started (path -> lines),
# for the evidence plugin to record with the test; None where this judge run traces no lines.
LINES_RAN: dict[str, set[int]] = {}


@cache
def added_lines() -> dict[str, tuple[str, frozenset[int]]]:
    """The files the subject traces, as its code objects name them: (the path in the diff, the added lines)."""
    path = os.environ.get(protocol.ADDED_LINES)
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
def _control(platform: str | None) -> socket.socket:
    """The socket to the zygote on ``platform`` (None: the machine's own)."""
    if platform is None:
        fd = os.environ.get(protocol.ZYGOTE_FD)
        if not fd:
            raise RuntimeError("no zygote: hidden tests run only in a judge process started by the grader")
        return socket.socket(fileno=int(fd))
    fd = json.loads(os.environ.get(protocol.PLATFORM_ZYGOTES) or "{}").get(platform)
    if fd is None:
        raise RuntimeError(f"this judge run has no zygote on the platform {platform!r}: a check asks only for "
                           "platforms its rubric declares ([platforms] in rubric.toml)")
    return socket.socket(fileno=int(fd))


_SUBJECTS: dict[tuple[str, str, str | None], Subject] = {}
_COUNTER = CallCounter()
# The controls' times this run's candidate calls are held to (GRADER_CALL_BUDGETS), and, in a calibration run over
# the reference fix, where the times measured are written (GRADER_CALL_TIMES_OUT).
_BUDGETS = CallTimes.load(os.environ.get(protocol.CALL_BUDGETS))
_MEASURED = CallTimes() if os.environ.get(protocol.CALL_TIMES_OUT) else None


def _measure(candidate: Subject, key: str, fresh: bool, probe: str, timeout: float | None,
             max_bytes: int | None, args: dict):
    """A calibration run's call: timed on the reference fix (the run's candidate), then on the base with the same
    arguments, held to the budget the reference's time gives; both times are recorded."""
    started = time.monotonic()
    try:
        result = candidate._timed_call(probe, timeout, max_bytes, args, None)
    except ProbeRaised:
        _MEASURED.note(key, "reference", time.monotonic() - started, fresh)
        _mirror_on_base(key, probe, timeout, max_bytes, args)
        raise
    except (ProbeTimeout, SubjectBroken):
        _MEASURED.note(key, "reference", None, fresh)
        _mirror_on_base(key, probe, timeout, max_bytes, args)
        raise
    _MEASURED.note(key, "reference", result[1], fresh)
    _mirror_on_base(key, probe, timeout, max_bytes, args)
    return result


def _mirror_on_base(key: str, probe: str, timeout: float | None, max_bytes: int | None, args: dict) -> None:
    base = subject("base")
    fresh = base.sock is None
    reference = _MEASURED.budget(key, fresh)
    started = time.monotonic()
    try:
        _, seconds = base._timed_call(probe, timeout, max_bytes, args, reference)
    except ProbeRaised:
        seconds = time.monotonic() - started
    except (ProbeTimeout, SubjectBroken):
        seconds = None
    _MEASURED.note(key, "base", seconds, fresh)
    _MEASURED.save(os.environ[protocol.CALL_TIMES_OUT])


def subject(name: str = "candidate", instance: str = "main", platform: str | None = None) -> Subject:
    """The named subject of this judge run ("candidate": the patched tree; "base": the unpatched base). Another
    ``instance`` is a process of its own over the same tree (a speed measurement that must not share a process
    with the correctness probes' settings). With ``platform`` (one the task's rubric declares), a process of its
    own on that platform (``grader.core.rubric.SubjectPlatform``)."""
    key = (name, instance, platform)
    if key not in _SUBJECTS:
        spec = load_subjects(os.environ[protocol.SUBJECTS]).get(name)
        if spec is None:
            raise RuntimeError(f"this judge run has no {name!r} subject")
        _SUBJECTS[key] = Subject(name, spec, _control(platform))
    return _SUBJECTS[key]


def end_all() -> None:
    """Kill every subject this judge started (at the end of its run)."""
    for handle in _SUBJECTS.values():
        handle.kill()
