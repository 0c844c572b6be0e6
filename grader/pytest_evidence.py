"""pytest plugin, loaded with ``-p grader.pytest_evidence`` into the judge process.

It writes one JSON line per test phase outcome to the file named by ``GRADER_EVIDENCE_OUT``, in the judge's own
folder, which no subject can see or reach. A ``start`` line is written before each test runs, so a test that
hangs or kills the judge is still known by name. A test whose probe went over its budget where a control finished
the same call fails, its message starting ``timeout:``; one whose probe did not answer where no control finished
either is marked ``timeout`` (not evaluated); a skip says who decided it. Where the subject traces the patch's lines
(``GRADER_ADDED_LINES``), a test's last phase also records which added lines ran in the candidate's subject during
the test (``ran``: the diff's path -> tree line numbers), as the judge bounded them. A re-run of some checks
(``GRADER_ONLY_TESTS``, a JSON list of node ids in the judge's folder) deselects every other test before any is
reported. The last line, ``session_end``, is written when pytest's session ends. Log parsing stays in
``grader.run``.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from grader.sandbox import protocol

_stream = None


def _emit(record: dict) -> None:
    global _stream
    if _stream is None:
        path = os.environ.get(protocol.EVIDENCE_OUT)
        if not path:
            return
        _stream = open(path, "a", buffering=1, encoding="utf-8")
    _stream.write(json.dumps(record) + "\n")
    _stream.flush()


def _criteria_of(item) -> list[dict]:
    found = []
    for mark in item.iter_markers("criterion"):
        weight = float(mark.kwargs.get("weight", 1.0))
        found.extend({"id": cid, "weight": weight} for cid in mark.args)
    return found


def _first_doc_line(item) -> str:
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _describe(item) -> dict:
    return {
        "nodeid": item.nodeid,
        "criteria": _criteria_of(item),
        "kinds": [m for m in ("gpu", "static", "variant") if item.get_closest_marker(m)],
        "doc": _first_doc_line(item),
    }


def pytest_collection_modifyitems(session, config, items):
    """In a re-run of some checks, only those run: exact node ids, so a parametrized case is never confused with
    another (as a ``-k`` expression could be)."""
    listed = os.environ.get(protocol.ONLY_TESTS)
    if not listed:
        return
    with open(listed, encoding="utf-8") as handle:
        wanted = set(json.load(handle))
    deselected = [item for item in items if item.nodeid not in wanted]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid in wanted]


def pytest_collection_finish(session):
    """Every collected test up front, so tests that never get to run (time limit, crash) still count."""
    for item in session.items:
        _emit({"event": "collected", **_describe(item)})


def _lines_ran() -> dict[str, set[int]]:
    client = sys.modules.get("grader.sandbox.client")
    return client.LINES_RAN if client is not None else {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _lines_ran().clear()
    _emit({"event": "start", **_describe(item)})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    record = {
        "event": "report",
        **_describe(item),
        "when": report.when,
        "outcome": report.outcome,
        "duration": round(report.duration, 3),
    }
    if report.skipped and isinstance(report.longrepr, tuple):
        record["message"] = str(report.longrepr[2])
        marked = item.get_closest_marker("skip") or item.get_closest_marker("skipif")
        record["skipped_by"] = "marker" if marked and report.when == "setup" else "judge"
    elif report.failed:
        record["message"] = report.longreprtext[-4000:]
        if call.excinfo is not None and _is_probe_timeout(call.excinfo.value):
            record["timeout"] = not _is_over_budget(call.excinfo.value)
            record["message"] = f"timeout: {call.excinfo.value}"
    if report.when == "teardown" and os.environ.get(protocol.ADDED_LINES):
        record["ran"] = {path: sorted(lines) for path, lines in sorted(_lines_ran().items()) if lines}
    _emit(record)


def _is_probe_timeout(exc: BaseException) -> bool:
    from grader.sandbox.client import ProbeTimeout

    return isinstance(exc, ProbeTimeout)


def _is_over_budget(exc: BaseException) -> bool:
    from grader.sandbox.client import ProbeOverBudget

    return isinstance(exc, ProbeOverBudget)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """The protocol's last word: a judge whose evidence lacks it ended before its session did (killed, out of
    memory, a crashed harness), and its run is no verdict (``grader.run.judge_fault``)."""
    _emit({"event": "session_end", "exitstatus": int(exitstatus)})


def pytest_collectreport(report):
    if report.failed:
        _emit({"event": "collect_error", "nodeid": report.nodeid, "message": report.longreprtext[-4000:]})
