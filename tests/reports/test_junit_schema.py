"""junit.xml against the Jenkins JUnit schema that CI reporters implement, and its one mapping from criterion state
to testcase outcome.

No schema is fetched or vendored: the constraints below are those of the two schemas Jenkins' reporters read, the
JUnit plugin's ``junit-4.xsd`` (dtkit) and the xUnit plugin's ``junit-10.xsd``, where they are strictest. Which
attributes each element may carry and which it must, which children it may hold and in what order, and what a
``<skipped>`` may carry (``junit-4.xsd``: text only, no attribute) are written out here from those schemas; a file
that passes here passes both.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from grader.core.records import CandidateResult, CriterionResult, EvidenceEntry
from grader.reports.report import CRITERION_OUTCOME, write_junit

# element -> (attributes allowed, attributes required)
ATTRIBUTES = {
    "testsuites": ({"name", "time", "tests", "failures", "disabled", "errors"}, set()),
    "testsuite": ({"name", "tests", "failures", "errors", "time", "disabled", "skipped", "timestamp", "hostname",
                   "id", "package"}, {"name", "tests"}),
    "testcase": ({"name", "assertions", "time", "classname", "status"}, {"name"}),
    "skipped": (set(), set()),
    "failure": ({"message", "type"}, set()),
    "error": ({"message", "type"}, set()),
    "system-out": (set(), set()),
    "system-err": (set(), set()),
    "properties": (set(), set()),
    "property": ({"name", "value"}, {"name", "value"}),
}
# element -> its children as a regular expression over their names in document order (junit-4.xsd's sequences)
CHILDREN = {
    "testsuites": r"(testsuite )*",
    "testsuite": r"(properties )?(testcase )*(system-out )?(system-err )?",
    "testcase": r"(skipped )?(error )*(failure )*(system-out )*(system-err )*",
    "properties": r"(property )*",
    "skipped": "", "failure": "", "error": "", "system-out": "", "system-err": "", "property": "",
}
INTEGER = re.compile(r"\d+")
DECIMAL = re.compile(r"\d+(\.\d+)?")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")  # xs:dateTime without a zone, as junit-4.xsd wants it
TYPED = {"tests": INTEGER, "failures": INTEGER, "errors": INTEGER, "skipped": INTEGER, "disabled": INTEGER,
         "time": DECIMAL, "timestamp": TIMESTAMP}


def schema_problems(element: ET.Element, where: str = "") -> list[str]:
    """Every way ``element`` and what it holds break the schema's constraints, as paths."""
    here = f"{where}/{element.tag}"
    if element.tag not in ATTRIBUTES:
        return [f"{here}: element not in the schema"]
    allowed, required = ATTRIBUTES[element.tag]
    problems = [f"{here}@{name}: attribute not allowed" for name in sorted(set(element.attrib) - allowed)]
    problems += [f"{here}@{name}: required attribute missing" for name in sorted(required - set(element.attrib))]
    problems += [f"{here}@{name}={value!r}: not of its type" for name, value in element.attrib.items()
                 if name in TYPED and not TYPED[name].fullmatch(value)]
    order = "".join(f"{child.tag} " for child in element)
    if not re.fullmatch(CHILDREN[element.tag], order):
        problems.append(f"{here}: children {order!r} not in the schema's order {CHILDREN[element.tag]!r}")
    if CHILDREN[element.tag] == "" and element.tag == "property" and (element.text or "").strip():
        problems.append(f"{here}: text not allowed")
    return problems + [p for child in element for p in schema_problems(child, here)]


def counts_agree(root: ET.Element) -> list[str]:
    """Each suite's counts are its testcases' outcomes, and the root's are the suites' sums."""
    problems = []
    for suite in root.iter("testsuite"):
        cases = list(suite.iter("testcase"))
        for attribute, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
            if int(suite.get(attribute, "0")) != sum(case.find(tag) is not None for case in cases):
                problems.append(f"suite {suite.get('name')}: {attribute} is not its cases' count")
        if int(suite.get("tests")) != len(cases):
            problems.append(f"suite {suite.get('name')}: tests is not its cases' count")
    for attribute in ("tests", "failures", "errors"):
        if int(root.get(attribute, "0")) != sum(int(s.get(attribute, "0")) for s in root.iter("testsuite")):
            problems.append(f"testsuites@{attribute} is not the suites' sum")
    return problems


def evidence(test: str, status: str, kinds=(), message: str = "") -> EvidenceEntry:
    return EvidenceEntry(f"t.py::{test}", status, 1.0, f"claim {test}", list(kinds), 0.25, message)


def result(cid: str, verdict: str, statuses: dict[str, str], **changes) -> CandidateResult:
    scores = {"met": 1.0, "partial": 0.5, "unmet": 0.0, "not_evaluated": None}
    criteria = {}
    for c, status in statuses.items():
        checks = [evidence(f"test_{c}", {"met": "passed", "not_evaluated": "skipped"}.get(status, "failed"))]
        if c == "c3":  # a criterion with GPU checks that did not run here
            checks.append(evidence("test_c3_on_gpu", "skipped", ["gpu"], "needs a CUDA GPU: no CUDA GPU here"))
        criteria[c] = CriterionResult(c, f"title {c}", scores[status], status, f"why {c}", checks)
    score = {"full": 1.0, "partial": 0.6, "fail": 0.1}.get(verdict)
    return CandidateResult(cid, "int8-kv-rounding", f"{cid}.diff", verdict, score, criteria, None, "Summary.",
                           **changes)


STATES = {"c1": "met", "c2": "partial", "c3": "met", "c4": "unmet", "c5": "not_evaluated"}


def every_kind() -> list[CandidateResult]:
    return [result("passing", "partial", STATES), result("failing", "fail", STATES),
            result("slow", "incomplete", STATES, run_status="timed_out"),
            result("broken", "error", STATES, run_status="grader_error", error="the judge died"),
            result("empty", "no_diff", {})]


def outcome_of(case: ET.Element) -> str:
    return next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")


def test_junit_keeps_to_the_jenkins_schema(tmp_path):
    path = write_junit(tmp_path / "junit.xml", every_kind(), None, "2026-12-01T21:00:00+00:00")
    root = ET.parse(path).getroot()
    assert schema_problems(root) == []
    assert counts_agree(root) == []


def test_the_schema_checks_can_fail():
    root = ET.fromstring('<testsuites skipped="1"><testsuite name="t" tests="1"><testcase name="c">'
                         '<system-out>x</system-out><skipped message="m"/></testcase></testsuite></testsuites>')
    problems = schema_problems(root)
    assert any("testsuites@skipped" in p for p in problems)
    assert any("skipped@message" in p for p in problems)
    assert any("not in the schema's order" in p for p in problems)


def test_a_criterion_state_is_the_same_outcome_in_every_candidate(tmp_path):
    path = write_junit(tmp_path / "junit.xml", every_kind(), None)
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(path).getroot().iter("testcase")}
    for candidate in ("passing", "failing"):
        for cid, state in STATES.items():
            assert outcome_of(cases[(candidate, f"{cid} title {cid}")]) == CRITERION_OUTCOME[state], (candidate, cid)
    # A candidate not graded completely reports no criterion state: every case is skipped with its reason.
    for candidate in ("slow", "broken"):
        outcomes = {name: outcome_of(case) for (cls, name), case in cases.items() if cls == candidate}
        assert {o for n, o in outcomes.items() if n != "verdict"} == {"skipped"}
    assert outcome_of(cases[("slow", "verdict")]) == "skipped"
    assert cases[("slow", "verdict")].find("skipped").text.startswith("timed out")
    assert outcome_of(cases[("broken", "verdict")]) == "error"


def test_gpu_checks_not_run_are_skipped_with_the_reason(tmp_path):
    path = write_junit(tmp_path / "junit.xml", every_kind(), None)
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(path).getroot().iter("testcase")}
    gpu = cases[("passing", "c3 gpu checks")]
    assert outcome_of(gpu) == "skipped"
    assert "GPU check(s) not run: needs a CUDA GPU" in gpu.find("skipped").text
    # The criterion's own case reads its state (met on the checks that ran); no other criterion has a GPU case.
    assert outcome_of(cases[("passing", "c3 title c3")]) == "passed"
    assert not any(name.endswith("gpu checks") and not name.startswith("c3") for _, name in cases)


def test_gpu_checks_that_ran_pass_or_fail_by_their_own_results(tmp_path):
    ran = result("on-gpu", "partial", STATES)
    c3 = ran.criteria["c3"]
    failed = replace(c3, evidence=[c3.evidence[0], replace(c3.evidence[1], status="failed", message="E wrong")])
    ran = replace(ran, criteria={**ran.criteria, "c3": failed})
    path = write_junit(tmp_path / "junit.xml", [ran], None)
    cases = {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}
    assert outcome_of(cases["c3 gpu checks"]) == "failure"
    assert "test_c3_on_gpu" in cases["c3 gpu checks"].find("failure").text


def test_reordered_bundle_keeps_its_test_names(tmp_path):
    from grader.pipeline.ingest import parse_bundle

    entries = [f"Judge paragraph {n} about the change.\n\ndiff --git a/vllm/x{n}.py b/vllm/x{n}.py\n"
               f"--- a/vllm/x{n}.py\n+++ b/vllm/x{n}.py\n@@ -1 +1 @@\n-a\n+b{n}\n" for n in range(4)]
    entries.append("no diff captured (agent ran out of time)\n")

    def ids(order: list[int], name: str) -> list[str]:
        path = tmp_path / name
        path.write_text("https://github.com/vllm-project/vllm\n" + "\n".join(entries[i] for i in order))
        return [c.id for c in parse_bundle(path, task="int8-kv-rounding")]

    (tmp_path / "other").mkdir()
    forward = ids([0, 1, 2, 3, 4], "bundle.txt")
    backward = ids([4, 3, 2, 1, 0], "other/bundle.txt")
    assert sorted(forward) == sorted(backward)
    assert len(set(forward)) == 5
    # The position is still there, as a label.
    by_id = {c.id: c for c in parse_bundle(tmp_path / "other" / "bundle.txt", task="int8-kv-rounding")}
    assert by_id[forward[0]].bundle_position == 4 and by_id[forward[0]].source.endswith("#4")


def test_reordered_bundle_gives_the_same_junit_names(tmp_path):
    from grader.pipeline.ingest import parse_bundle

    entries = [f"Paragraph {n}.\n\ndiff --git a/vllm/y.py b/vllm/y.py\n--- a/vllm/y.py\n+++ b/vllm/y.py\n"
               f"@@ -1 +1 @@\n-a\n+c{n}\n" for n in range(3)]
    names = []
    for order, folder in (([0, 1, 2], "a"), ([2, 0, 1], "b")):
        (tmp_path / folder).mkdir()
        bundle = tmp_path / folder / "runs.txt"
        bundle.write_text("https://github.com/vllm-project/vllm\n" + "\n".join(entries[i] for i in order))
        graded = [result(c.id, "partial", STATES) for c in parse_bundle(bundle, "int8-kv-rounding")]
        path = write_junit(tmp_path / folder / "junit.xml", graded, None)
        names.append(sorted((c.get("classname"), c.get("name")) for c in ET.parse(path).getroot().iter("testcase")))
    assert names[0] == names[1]


def test_junit_file_is_what_reporters_parse(tmp_path):
    """junitparser (a reader CI tools use) reads every case and its outcome."""
    from junitparser import JUnitXml

    path = write_junit(tmp_path / "junit.xml", every_kind(), None)
    suites = list(JUnitXml.fromfile(str(path)))
    assert sum(s.tests for s in suites) == len(list(ET.parse(path).getroot().iter("testcase")))
    assert Path(path).read_text().startswith("<?xml")
