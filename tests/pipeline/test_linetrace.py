"""Which of the patch's added lines ran in each failing check: the subject's tracer, the judge's bounds on what a
subject reports, the evidence fields, the traced re-run of only the failing checks, and that tracing never changes
a result (apart from the ``ran`` and ``rerun`` fields), whatever the re-run does."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from grader.drive import one_candidate
from grader.core.records import Candidate, EvidenceEntry, GradingOptions, RunReport, TestOutcome
from grader.core.rubric import REPO_ROOT
from grader.drive.one_candidate import BaseCache, grade_candidate
from grader.pipeline.run import added_lines, parse_evidence
from grader.sandbox import client, protocol
from grader.sandbox.linetrace import LineTrace
from grader.pipeline.traced_rerun import checks_to_trace, rerun_finished, trace_failing_checks, with_lines_ran

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


def outcome(nodeid: str, status: str, message: str = "", ran=None) -> TestOutcome:
    return TestOutcome(nodeid, status, {"c1": 1.0}, message=message, ran=ran)


def report(*outcomes: TestOutcome, timed_out: bool = False) -> RunReport:
    return RunReport(list(outcomes), 1, timed_out, "", 1.0)


FIRST = report(outcome("t::pass", "passed"), outcome("t::fail", "failed", "assert 1 == 2"),
               outcome("t::error", "error", "fixture broke"), outcome("t::slow", "timeout", "no control finished"),
               outcome("t::budget", "failed", "timeout: over budget"), outcome("t::skip", "skipped"))


def test_only_failing_and_erroring_checks_are_re_run():
    assert checks_to_trace(FIRST) == ["t::fail", "t::error", "t::budget"]
    # A run that is no verdict's evidence has nothing to trace.
    assert checks_to_trace(replace(FIRST, timed_out=True)) == []
    assert checks_to_trace(replace(FIRST, grader_error="judge lost")) == []


def test_a_reproduced_failure_gets_the_lines_of_its_re_run_and_nothing_else_changes():
    rerun = report(outcome("t::fail", "failed", "assert 1 == 2", {"vllm/x.py": [3]}),
                   outcome("t::error", "error", "fixture broke", {}),
                   outcome("t::budget", "failed", "timeout: over budget", {"vllm/x.py": [4]}))
    merged = with_lines_ran(FIRST, rerun)
    by_id = {o.nodeid: o for o in merged.outcomes}
    assert by_id["t::fail"].ran == {"vllm/x.py": [3]} and by_id["t::error"].ran == {}
    assert by_id["t::budget"].ran == {"vllm/x.py": [4]}
    assert by_id["t::pass"].ran is None and by_id["t::slow"].ran is None
    assert [replace(o, ran=None) for o in merged.outcomes] == FIRST.outcomes
    assert replace(merged, outcomes=[]) == replace(FIRST, outcomes=[])


def test_a_re_run_that_does_not_reproduce_changes_no_status():
    """A flaky check, or a candidate that behaves otherwise under a tracer: the first run's status stands."""
    rerun = report(outcome("t::fail", "passed", ran={"vllm/x.py": [3]}),
                   outcome("t::error", "failed", "other", {}),
                   outcome("t::budget", "failed", "assert 1 == 2", {"vllm/x.py": [4]}))
    merged = with_lines_ran(FIRST, rerun)
    assert [o.status for o in merged.outcomes] == [o.status for o in FIRST.outcomes]
    assert [o.message for o in merged.outcomes] == [o.message for o in FIRST.outcomes]
    by_id = {o.nodeid: o for o in merged.outcomes}
    for nodeid, status in (("t::fail", "passed"), ("t::error", "failed"), ("t::budget", "failed")):
        assert by_id[nodeid].ran is None
        assert by_id[nodeid].rerun.startswith(f"re-run did not reproduce: the traced re-run of this check {status}")


def test_a_re_run_cut_short_is_not_the_candidates_failure():
    rerun = report(outcome("t::fail", "failed", ran={"vllm/x.py": [3]}), outcome("t::error", "timeout"),
                   timed_out=True)
    assert not rerun_finished(rerun)
    merged = with_lines_ran(FIRST, rerun)
    by_id = {o.nodeid: o for o in merged.outcomes}
    assert by_id["t::fail"].ran == {"vllm/x.py": [3]}
    for nodeid in ("t::error", "t::budget"):  # timed out in the re-run; never reached by it
        assert by_id[nodeid].ran is None and by_id[nodeid].rerun.startswith("re-run did not finish")
    assert [o.status for o in merged.outcomes] == [o.status for o in FIRST.outcomes]
    assert merged.timed_out is False


def test_no_re_run_where_nothing_can_be_traced_or_nothing_failed():
    calls = []

    def run_traced(node_ids):
        calls.append(node_ids)
        return report()

    merged, rerun = trace_failing_checks(FIRST, False, run_traced)
    assert rerun is None and not calls
    assert {o.nodeid: o.ran for o in merged.outcomes if o.ran is not None} == \
        {"t::fail": {}, "t::error": {}, "t::budget": {}}
    passing = report(outcome("t::pass", "passed"))
    assert trace_failing_checks(passing, True, run_traced) == (passing, None) and not calls
    trace_failing_checks(FIRST, True, run_traced)
    assert calls == [["t::fail", "t::error", "t::budget"]]


ONLY_TESTS_FILE = """
import pytest

@pytest.mark.parametrize("case", ["a", "a-b", "b"])
def test_case(case):
    pass

def test_other():
    pass
"""


def test_a_re_run_runs_exactly_the_listed_node_ids(tmp_path):
    (tmp_path / "test_sample.py").write_text(ONLY_TESTS_FILE)
    (tmp_path / "only.json").write_text(json.dumps(["test_sample.py::test_case[a]", "test_sample.py::test_other"]))
    evidence = tmp_path / "evidence.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **{protocol.EVIDENCE_OUT: str(evidence),
                                                        protocol.ONLY_TESTS: str(tmp_path / "only.json")})
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "grader.pipeline.pytest_evidence",
                    "--rootdir", str(tmp_path), str(tmp_path)], env=env, cwd=tmp_path, check=True,
                   capture_output=True)
    outcomes, _ = parse_evidence(evidence.read_text(), False)
    assert sorted(o.nodeid for o in outcomes) == ["test_sample.py::test_case[a]", "test_sample.py::test_other"]


def without_traces(result) -> dict:
    data = result.to_json()
    data.pop("timings")
    for criterion in data["criteria"].values():
        for entry in criterion["evidence"]:
            entry.pop("ran", None)
            entry.pop("rerun", None)
            entry.pop("duration_s")
    return data


def counting_runs(monkeypatch) -> list[dict]:
    """Every judge run a grading makes: its ``traced`` and ``only`` arguments and the node ids it reported."""
    runs = []
    real = one_candidate.run_hidden_tests

    def counted(*args, **kwargs):
        run = real(*args, **kwargs)
        runs.append({"traced": kwargs.get("traced"), "only": kwargs.get("only"),
                     "reported": sorted(o.nodeid for o in run.outcomes)})
        return run

    monkeypatch.setattr(one_candidate, "run_hidden_tests", counted)
    return runs


def sample_candidate(task: str, sample: str) -> Candidate:
    return Candidate(sample, "test", (REPO_ROOT / "candidates" / task / f"{sample}.diff").read_text(), task=task)


def failing_entries(result) -> list[EvidenceEntry]:
    return [e for c in result.criteria.values() for e in c.evidence if e.status in ("failed", "error")]


@pytest.mark.slow
@pytest.mark.parametrize("task,sample", [("xpu-kv-cache-dtypes", "backend-only"), ("int8-kv-rounding", "key-only")])
def test_tracing_never_changes_a_result(task, sample, monkeypatch):
    """The same sample graded with line tracing on and off: identical results but for the ``ran`` fields, which
    only the failing checks carry, from a re-run of exactly those checks."""
    candidate = sample_candidate(task, sample)
    bases = BaseCache()
    untraced, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=False, use_evidence_cache=False))
    runs = counting_runs(monkeypatch)
    traced, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=True, use_evidence_cache=False))
    assert traced.verdict != "error", traced.summary
    failing = failing_entries(traced)
    assert failing, "the sample is chosen for failing checks"
    assert all(e.ran is not None for e in failing), failing
    assert all(e.ran is None for c in traced.criteria.values() for e in c.evidence if e not in failing)
    assert all(e.ran is None for c in untraced.criteria.values() for e in c.evidence)
    assert without_traces(traced) == without_traces(untraced)
    # One untraced run of every check, then one traced run of the failing ones alone.
    assert [(r["traced"] is None, r["only"] is None) for r in runs] == [(True, True), (False, False)]
    assert sorted(runs[1]["only"]) == runs[1]["reported"] == sorted({e.test for e in failing})
    assert len(runs[0]["reported"]) > len(runs[1]["reported"])


@pytest.mark.slow
def test_a_re_run_cannot_change_a_verdict(monkeypatch, private_cache):
    """Whatever the traced re-run reports (every check passing, as a candidate that detects the tracer might make
    it, or a time-out), the result is the untraced one; a re-run cut short is not cached, so the next grading
    traces again, and the untraced run's evidence is reused rather than run twice."""
    candidate = sample_candidate("xpu-kv-cache-dtypes", "backend-only")
    bases = BaseCache()
    untraced, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=False))
    runs = counting_runs(monkeypatch)
    real = one_candidate.run_hidden_tests
    lie = {"status": "timeout", "timed_out": True}

    def lying_rerun(*args, **kwargs):
        if kwargs.get("only") is None:
            return real(*args, **kwargs)
        runs.append({"traced": kwargs.get("traced"), "only": kwargs["only"], "reported": sorted(kwargs["only"])})
        return report(*(outcome(n, lie["status"], ran={}) for n in kwargs["only"]), timed_out=lie["timed_out"])

    monkeypatch.setattr(one_candidate, "run_hidden_tests", lying_rerun)
    cut_short, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=True))
    lie.update(status="passed", timed_out=False)
    not_reproduced, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=True))
    assert [r["only"] is not None for r in runs] == [True, True], "the untraced run is reused; the cut re-run is not"
    for result, note in ((cut_short, "re-run did not finish"), (not_reproduced, "re-run did not reproduce")):
        assert without_traces(result) == without_traces(untraced)
        assert (result.verdict, result.score, result.run_status) == (untraced.verdict, untraced.score, "complete")
        failing = failing_entries(result)
        assert failing and all(e.ran is None and e.rerun.startswith(note) for e in failing), failing
