"""Which of the patch's added lines ran in each check: the subject's tracer, the judge's bounds on what a subject
reports, the evidence fields, and that tracing never changes a result (apart from the ``ran`` fields)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from grader.core.records import Candidate
from grader.core.rubric import REPO_ROOT
from grader.core.records import GradingOptions
from grader.one_candidate import BaseCache, grade_candidate
from grader.run import added_lines, parse_evidence
from grader.sandbox import client
from grader.sandbox.linetrace import LineTrace

MODULE = """\
TOP = 1


def changed(x):
    if x > 0:
        return x + 1
    return -x


class Holder:
    FIELD = 2

    def method(self):
        return self.FIELD
"""


def load(path):
    spec = importlib.util.spec_from_file_location("traced_sample", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trace_records_only_added_lines_that_ran_inside_functions(tmp_path):
    path = tmp_path / "traced_sample.py"
    path.write_text(MODULE)
    trace = LineTrace({str(path): [1, 5, 6, 7, 11, 14]})
    trace.start()
    module = load(path)
    module.changed(3)
    module.Holder().method()
    ran = trace.stop()
    # 1 (module level) and 11 (class body) ran at import, which no check owns; 7 did not run for x > 0.
    assert ran == {str(path): [5, 6, 14]}
    assert sys.gettrace() is None


def test_trace_ignores_files_it_was_not_given(tmp_path):
    path = tmp_path / "traced_sample.py"
    path.write_text(MODULE)
    trace = LineTrace({str(tmp_path / "other.py"): [5, 6]})
    trace.start()
    load(path).changed(1)
    assert trace.stop() == {}


def test_judge_keeps_only_known_files_and_added_lines(tmp_path, monkeypatch):
    known = tmp_path / "added-lines.json"
    known.write_text(json.dumps({"/root/vllm/x.py": {"path": "vllm/x.py", "lines": [3, 4, 9]}}))
    monkeypatch.setenv("GRADER_ADDED_LINES", str(known))
    monkeypatch.setattr(client, "LINES_RAN", {})
    client.added_lines.cache_clear()
    try:
        client.note_lines_ran({"/root/vllm/x.py": [3, 5, 9, "4", True, 10 ** 30], "/etc/passwd": [1],
                               "/root/vllm/y.py": [3]})
        client.note_lines_ran(["not", "a", "mapping"])
        client.note_lines_ran({"/root/vllm/x.py": "3"})
        assert client.LINES_RAN == {"vllm/x.py": {3, 9}}
    finally:
        client.added_lines.cache_clear()


def test_added_lines_are_the_tree_lines_the_patch_added(tmp_path):
    base, tree = tmp_path / "base", tmp_path / "tree"
    for root in (base, tree):
        (root / "vllm").mkdir(parents=True)
    (base / "vllm" / "a.py").write_text("one\ntwo\nthree\n")
    (tree / "vllm" / "a.py").write_text("zero\none\nTWO\nthree\n")
    (tree / "vllm" / "new.py").write_text("x = 1\n")
    (tree / "vllm" / "k.cu").write_text("int x;\n")
    found = added_lines(base, tree, ["vllm/a.py", "vllm/new.py", "vllm/k.cu", "vllm/gone.py"])
    assert found == {"vllm/a.py": [1, 3], "vllm/new.py": [1]}


def test_evidence_takes_lines_ran_from_the_last_phase_and_none_when_untraced():
    lines = [{"event": "report", "nodeid": "t::a", "criteria": [], "when": w, "outcome": "passed", "duration": 0}
             for w in ("setup", "call")]
    lines.append({**lines[0], "when": "teardown", "ran": {"vllm/x.py": [4, 2, "bad"]}})
    lines += [{"event": "report", "nodeid": "t::b", "criteria": [], "when": w, "outcome": "passed",
               "duration": 0} for w in ("setup", "call", "teardown")]
    outcomes, _ = parse_evidence("\n".join(json.dumps(line) for line in lines), False)
    by_id = {o.nodeid: o for o in outcomes}
    assert by_id["t::a"].ran == {"vllm/x.py": [2, 4]}
    assert by_id["t::b"].ran is None


def without_traces(result) -> dict:
    data = result.to_json()
    data.pop("timings")
    for criterion in data["criteria"].values():
        for entry in criterion["evidence"]:
            entry.pop("ran", None)
            entry.pop("duration_s")
    return data


@pytest.mark.slow
@pytest.mark.parametrize("task,sample", [("xpu-kv-cache-dtypes", "backend-only"), ("int8-kv-rounding", "key-only")])
def test_tracing_never_changes_a_result(task, sample):
    """The same sample graded with line tracing on and off: identical results but for the ``ran`` fields."""
    diff = (REPO_ROOT / "candidates" / task / f"{sample}.diff").read_text()
    candidate = Candidate(sample, "test", diff, task=task)
    bases = BaseCache()
    traced, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=True, use_evidence_cache=False))
    untraced, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=False, use_evidence_cache=False))
    assert traced.verdict != "error", traced.summary
    ran = [e.ran for c in traced.criteria.values() for e in c.evidence]
    assert any(ran) and all(r is not None for r in ran)
    assert all(e.ran is None for c in untraced.criteria.values() for e in c.evidence)
    assert without_traces(traced) == without_traces(untraced)
