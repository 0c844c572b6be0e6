"""pytest plugin, loaded with ``-p grader.pipeline.pytest_evidence`` into the judge process.

It writes one JSON line per test phase outcome to the file named by ``GRADER_EVIDENCE_OUT``, in the judge's own
folder, which no subject can see or reach. A ``start`` line is written before each test runs, so a test that
hangs or kills the judge is still known by name. A test whose probe went over its budget where a control finished
the same call fails, its message starting ``timeout:``; one whose probe did not answer where no control finished
either is marked ``timeout`` (not evaluated); a skip says who decided it. Where the subject traces the patch's lines
(``GRADER_ADDED_LINES``), a test's last phase also records which added lines ran in the candidate's subject during
the test (``ran``: the diff's path -> tree line numbers), as the judge bounded them. A re-run of some checks
(``GRADER_ONLY_TESTS``, a JSON list of node ids in the judge's folder) deselects every other test before any is
reported. The last line, ``session_end``, is written when pytest's session ends. Log parsing stays in
``grader.pipeline.run``.

Each test's ``collected`` record also names the declared case values it exercises (``cases``: axis -> sorted
values): those of its ``cases`` markers (on the test, its class or module, or its ``pytest.param``), and the
``str`` of each parametrize argument whose name is an axis one of its criteria declares (``[criteria.cN.cases]`` of
the task's rubric.toml). ``marked_cases`` holds the markers' share alone: a marked value no criterion of the test
declares is a typo that ``check-task`` refuses, while a parametrized value outside the declared ones only counts
for nothing.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from functools import cache
from pathlib import Path

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


@cache
def _declared_axes(tests_dir: Path) -> dict[str, dict[str, list[str]]]:
    """criterion -> axis -> declared values, from the rubric.toml of the task folder above ``tests_dir`` (empty
    where there is none or it does not read: the rubric's own validation reports that)."""
    for folder in (tests_dir, *tests_dir.parents):
        rubric = folder / "rubric.toml"
        if rubric.is_file():
            try:
                criteria = tomllib.loads(rubric.read_text(encoding="utf-8")).get("criteria", {})
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                return {}
            return {cid: dict(c["cases"]) for cid, c in criteria.items()
                    if isinstance(c, dict) and isinstance(c.get("cases"), dict)}
    return {}


def _as_values(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, (list, tuple, set, frozenset)) else [str(value)]


def _marked_cases(item) -> dict[str, set[str]]:
    marked: dict[str, set[str]] = {}
    for mark in item.iter_markers("cases"):
        for axis, value in mark.kwargs.items():
            marked.setdefault(axis, set()).update(_as_values(value))
    return marked


def _parametrized_cases(item, criteria: list[str]) -> dict[str, set[str]]:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if not params:
        return {}
    declared = _declared_axes(Path(str(item.path)).parent)
    axes = {axis for cid in criteria for axis in declared.get(cid, {})}
    return {name: {str(value)} for name, value in params.items() if name in axes}


def _cases_of(item, criteria: list[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(every case value the test exercises, the markers' share of them), each axis -> sorted values."""
    marked = _marked_cases(item)
    exercised = {axis: set(values) for axis, values in marked.items()}
    for axis, values in _parametrized_cases(item, criteria).items():
        exercised.setdefault(axis, set()).update(values)
    return ({axis: sorted(values) for axis, values in sorted(exercised.items())},
            {axis: sorted(values) for axis, values in sorted(marked.items())})


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
        described = _describe(item)
        cases, marked = _cases_of(item, [c["id"] for c in described["criteria"]])
        _emit({"event": "collected", **described, "cases": cases, "marked_cases": marked})


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
    memory, a crashed harness), and its run is no verdict (``grader.pipeline.run.judge_fault``)."""
    _emit({"event": "session_end", "exitstatus": int(exitstatus)})


def pytest_collectreport(report):
    if report.failed:
        _emit({"event": "collect_error", "nodeid": report.nodeid, "message": report.longreprtext[-4000:]})
