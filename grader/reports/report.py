"""Reports: the versioned results.json, HTML scorecards, JUnit XML and a Markdown summary."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from grader import __version__

from grader.reports import scorecard
from grader.core.paths import atomic_write, page_name
from grader.core.records import (CRITERION_IDS, SCHEMA_VERSION, CandidateResult, CriterionResult, EvidenceEntry,
                                 GraderRevision, Incomplete, RunInfo)
from grader.reports.outcome import ci_outcome, unfinished
from grader.core.sanitize import clean

TEMPLATES = Environment(loader=PackageLoader("grader", "templates"), autoescape=select_autoescape(["html", "j2"]))


def grader_revision() -> GraderRevision:
    """The grader's version and, when it runs from a git checkout, its commit and whether the tree has edits."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[2]), *argv],
                                  capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = None if commit is None else bool(git("status", "--porcelain", "--untracked-files=no"))
    return GraderRevision(__version__, commit, dirty)


def graded_run(*, began: str, gpu: str, candidates: int, containment: str, degraded: list[str], timeout: float,
               fail_under: float | None, exit_code: int, exit_reason: str, wall_s: float, backend: str, jobs: int,
               incomplete: Incomplete | None = None) -> RunInfo:
    """The run section of a grading made by this grader (``grade``, ``calibrate``): its version and revision, and
    the sandbox's shortfalls (``degraded``, each in words) as results.json states them."""
    return RunInfo(grader_version=__version__, grader=grader_revision(), started_at=began, gpu=gpu,
                   candidates=candidates, containment=containment, containment_degraded=bool(degraded),
                   containment_warning="; ".join(degraded) or None, timeout_s=float(timeout), fail_under=fail_under,
                   exit_code=exit_code, exit_reason=exit_reason, timings={"wall_s": wall_s}, backend=backend,
                   jobs=jobs, incomplete=incomplete)


def started_at() -> str:
    """Now, as ISO 8601 with the UTC offset."""
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


# What may differ between two runs that grade the same candidates the same way: when and how they ran.
RUN_CIRCUMSTANCES = ("started_at", "timings", "backend", "jobs")


def comparable(document: dict) -> dict:
    """``document`` (a results.json) without the fields that differ between identical gradings: the run's
    circumstances (RUN_CIRCUMSTANCES), each candidate's ``timings`` and each test's ``duration_s``."""
    document = json.loads(json.dumps(document))
    for key in RUN_CIRCUMSTANCES:
        document.get("run", {}).pop(key, None)
    for result in document.get("candidates", []):
        result.pop("timings", None)
        for criterion in result.get("criteria", {}).values():
            for entry in criterion.get("evidence", []):
                entry.pop("duration_s", None)
    return document


def differences(a, b, where: str = "") -> list[str]:
    """Where two JSON values differ, as paths (``.candidates[0].verdict: 'full' != 'partial'``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    if a == b:
        return []
    if isinstance(a, str) and isinstance(b, str):
        return [f"{where}: {parting(a, b)}"]
    return [f"{where}: {str(a)[:100]!r} != {str(b)[:100]!r}"]


def parting(a: str, b: str, before: int = 30, after: int = 70) -> str:
    """Where two different strings part: each from a little before their first differing character. Two long
    messages alike in their first hundred characters would otherwise print as equal."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, at - before)
    lead = f"from char {start}: " if start else ""
    return f"{lead}{a[start:at + after]!r} != {b[start:at + after]!r}"


def results_document(results: list[CandidateResult], run: RunInfo) -> dict:
    """The results.json document (see ``comparable`` for the fields that vary between identical runs): the one
    place results and the run section become dictionaries (``results_of`` and ``run_of`` read them back)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "grader_version": __version__,
        "run": run.to_json(),
        "candidates": [r.to_json() for r in sorted(results, key=lambda r: r.id)],
    }


def results_of(document: dict) -> list[CandidateResult]:
    """The candidates of a results.json document as records (``results_document``'s inverse); one that is not a
    result of this schema raises ``RecordError`` (a ``KeyError`` or ``TypeError`` for a document with no
    candidates list)."""
    return [CandidateResult.from_json(result) for result in document["candidates"]]


def run_of(document: dict) -> RunInfo:
    """The run section of a results.json document as a record; a missing or malformed one raises
    ``RecordError``."""
    return RunInfo.from_json(document.get("run"))


def write_results_json(out: Path, results: list[CandidateResult], run: RunInfo) -> Path:
    path = out / "results.json"
    atomic_write(path, json.dumps(results_document(results, run), indent=2, sort_keys=True) + "\n")
    return path


def _by_task(results: list[CandidateResult]) -> dict[str, list[CandidateResult]]:
    grouped = defaultdict(list)
    for r in sorted(results, key=lambda r: r.id):
        grouped[r.task or "(no task)"].append(r)
    return dict(sorted(grouped.items()))


STATIC_FILES = ("scorecard.css", "scorecard.js")


def copy_static(out: Path) -> None:
    """The pages' stylesheet and script, from the package into ``out/static`` (the pages load nothing else)."""
    shipped = resources.files("grader") / "static"
    for name in STATIC_FILES:
        atomic_write(out / "static" / name, (shipped / name).read_text(encoding="utf-8"))


def write_html(out: Path, results: list[CandidateResult], run: RunInfo, diffs: dict[str, str],
               judge: dict[str, str] | None = None) -> Path:
    """The scorecards: ``index.html`` and one page per candidate under ``candidates/`` (view model:
    ``grader.reports.scorecard``). ``judge`` maps candidate ids to a judge's overall verdict, shown beside the grader's."""
    tasks = scorecard.known_tasks()
    pages = out / "candidates"
    for r in results:
        shown_diff = clean(diffs.get(r.id, "").replace("\r\n", "\n"), limit=None)
        view = scorecard.build_candidate(r, shown_diff, judge, tasks)
        html = TEMPLATES.get_template("candidate.html.j2").render(page=view, r=r, run=run, static="../static/")
        # The page's view reads names out of the diff itself (a quoted name can decode to bytes that are not
        # UTF-8): what reaches the file is cleaned, so any page can be written and shows no control character.
        atomic_write(pages / page_name(r.id), clean(html, limit=None))
    return write_index(out, results, run, judge)


def write_index(out: Path, results: list[CandidateResult], run: RunInfo, judge: dict[str, str] | None = None) -> Path:
    """``index.html`` and the static files it loads, over pages already written under ``out/candidates``."""
    copy_static(out)
    index = scorecard.build_index(results, page_name, judge, scorecard.known_tasks())
    atomic_write(out / "index.html", clean(TEMPLATES.get_template("index.html.j2").render(
        index=index, run=run, static="static/"), limit=None))
    return out / "index.html"


def xml_safe(text: str | None) -> str:
    """``text`` as XML 1.0 can hold it. Candidate text was cleaned where it entered the records; a record from an
    older store may not have been, so it is cleaned again here (clean text passes unchanged)."""
    return clean(text or "", limit=None)


def measured_seconds(entries: list[EvidenceEntry]) -> float:
    """The measured time of the hidden tests behind ``entries`` (each test counted once), as recorded with the
    evidence, so a cached result keeps the time its tests took."""
    seen = {e.test: e.duration_s for e in entries}
    return round(sum(seen.values()), 3)


def junit_class(result: CandidateResult) -> str:
    """A candidate's JUnit classname: its id without the task folder it may start with, and no slash."""
    cid = result.id
    task = result.task or ""
    if task and cid.startswith(task + "/"):
        cid = cid[len(task) + 1:]
    return cid.replace("/", ".")


def verdict_message(result: CandidateResult, outcome: str, fail_under: float | None) -> str:
    headline = result.verdict + ("" if result.score is None else f" ({result.score:.2f})")
    if outcome == "skipped":
        why = unfinished(result) or "no diff to grade"
        return f"{why}: {first_sentence(result.summary) or headline}"
    if outcome == "failed" and fail_under is not None:
        return f"below --fail-under {fail_under:g}: {headline}"
    return headline


def first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + dot.strip()


def junit_timestamp(started: str | None) -> str:
    """JUnit's timestamp (ISO 8601 without an offset, in UTC) of the run's start."""
    moment = datetime.fromisoformat(started) if started else datetime.now(timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


# What a criterion's testcase is, by its state, the same in every candidate. A criterion of a candidate that was not
# graded completely (or whose grading broke, or that has no diff or no task) has no state to report: <skipped>, with
# the candidate's reason. The GPU case of a criterion (``cN gpu checks``, only where the criterion has checks that
# need a GPU) follows the same rule over those checks alone.
CRITERION_OUTCOME = {"met": "passed", "partial": "failure", "unmet": "failure", "not_evaluated": "skipped"}
JUNIT_TOTALS = ("tests", "failures", "errors", "skipped")


def gpu_checks_state(crit: CriterionResult) -> tuple[str, str] | None:
    """The state of a criterion's GPU checks (``met``, ``unmet`` or ``not_evaluated``) and why, or None where the
    criterion has none."""
    gpu = [e for e in crit.evidence if "gpu" in e.kinds]
    if not gpu:
        return None
    evaluated = [e for e in gpu if e.status in ("passed", "failed", "error")]
    if not evaluated:
        reasons = sorted({e.message.strip() for e in gpu if e.message.strip()})
        why = reasons[0] if reasons else "needs a CUDA GPU"
        return "not_evaluated", f"{len(gpu)} GPU check(s) not run: {why}"
    failing = [e.test.rsplit("::", 1)[-1] for e in evaluated if e.status != "passed"]
    if failing:
        return "unmet", f"{len(failing)} of {len(evaluated)} GPU check(s) fail: {', '.join(failing[:4])}"
    return "met", f"{len(evaluated)} GPU check(s) pass"


def write_junit(path: Path, results: list[CandidateResult], fail_under: float | None = None,
                started: str | None = None) -> Path:
    """One testsuite per task (with its time and the run's start); per candidate a ``verdict`` testcase, one per
    criterion (``c1 <title>``) and one for each criterion's GPU checks where it has some (``c1 gpu checks``),
    named the same in every run. The verdict case is what the exit code reads (grader.reports.outcome.ci_outcome): an
    ``<error>`` where grading broke, ``<skipped>`` where the candidate was not graded completely or has no diff, a
    ``<failure>`` below ``--fail-under`` (without it: verdict ``fail``). A criterion case follows CRITERION_OUTCOME.
    Each case's time is its tests' measured time, from the evidence.

    The file keeps to the Jenkins JUnit schema that reporters implement (tests/reports/test_junit_schema.py): a
    ``<skipped>`` carries its reason as text (the schema gives it no attribute), and the root carries no skipped
    count (the suites do)."""
    stamp = junit_timestamp(started)
    suites = ET.Element("testsuites", name="grader")
    totals: dict[str, float] = defaultdict(float)
    for task, group in _by_task(results).items():
        suite = ET.SubElement(suites, "testsuite", name=xml_safe(task), timestamp=stamp)
        counts: dict[str, float] = defaultdict(float)

        def case(classname: str, name: str, seconds: float) -> ET.Element:
            counts["tests"] += 1
            counts["time"] += seconds
            return ET.SubElement(suite, "testcase", classname=xml_safe(classname), name=xml_safe(name),
                                 time=f"{seconds:.3f}")

        def mark(element: ET.Element, kind: str, message: str, text: str = "") -> None:
            counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[kind]] += 1
            if kind == "skipped":
                ET.SubElement(element, kind).text = xml_safe(message)
                return
            ET.SubElement(element, kind, message=xml_safe(message)[:500]).text = xml_safe(text) or None

        def criterion_case(element: ET.Element, state: str, shown: str, why: str, skipped_because: str | None):
            outcome = "skipped" if skipped_because else CRITERION_OUTCOME[state]
            if outcome == "skipped":
                mark(element, "skipped", skipped_because or why)
            elif outcome == "failure":
                mark(element, "failure", shown, why)
            else:
                ET.SubElement(element, "system-out").text = xml_safe(f"{shown}: {why}")

        for r in group:
            classname = junit_class(r)
            outcome = ci_outcome(r, fail_under)
            evidence = [e for c in r.criteria.values() for e in c.evidence]
            verdict = case(classname, "verdict", measured_seconds(evidence))
            counts["measured"] += measured_seconds(evidence)
            message = verdict_message(r, outcome, fail_under)
            if outcome == "error":
                mark(verdict, "error", r.error or "not graded", r.summary)
            elif outcome == "skipped":
                mark(verdict, "skipped", message)
            elif outcome == "failed":
                mark(verdict, "failure", message, r.summary)
            not_graded = message if outcome in ("skipped", "error") else None
            for cid in CRITERION_IDS:
                crit = r.criteria.get(cid)
                if crit is None:
                    continue
                element = case(classname, f"{cid} {crit.title}", measured_seconds(crit.evidence))
                shown = crit.status if crit.score is None else f"{crit.status} ({crit.score:.2f})"
                criterion_case(element, crit.status, shown, crit.rationale,
                               f"{not_graded} (this criterion: {shown})" if not_graded else None)
                gpu = gpu_checks_state(crit)
                if gpu is not None:
                    gpu_evidence = [e for e in crit.evidence if "gpu" in e.kinds]
                    element = case(classname, f"{cid} gpu checks", measured_seconds(gpu_evidence))
                    criterion_case(element, gpu[0], gpu[0], gpu[1], not_graded)
        for key in JUNIT_TOTALS:
            suite.set(key, str(int(counts[key])))
            totals[key] += counts[key]
        # The suite's time is what its candidates' tests took (the verdict and criterion cases share those tests).
        suite.set("time", f"{counts['measured']:.3f}")
        totals["time"] += counts["measured"]
    for key in ("tests", "failures", "errors"):
        suites.set(key, str(int(totals[key])))
    suites.set("time", f"{totals['time']:.3f}")
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.indent(suites)
    atomic_write(path, ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n")
    return path


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table: one line, no column break, at most 160 characters."""
    flat = " ".join(xml_safe(text).split()).replace("|", "\\|")
    return flat if len(flat) <= 160 else flat[:159] + "\u2026"


def markdown_summary(results: list[CandidateResult]) -> str:
    """The step summary: a row per candidate with its criteria's states and the reason the index gives
    (``grader.reports.scorecard.reason``)."""
    tasks = scorecard.known_tasks()
    lines = ["| candidate | task | verdict | score | run | " + " | ".join(CRITERION_IDS) + " | reason |",
             "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in CRITERION_IDS) + " | --- |"]
    for r in sorted(results, key=lambda r: r.id):
        marks = [r.criteria[c].status if c in r.criteria else "-" for c in CRITERION_IDS]
        score = "-" if r.score is None else f"{r.score:.2f}"
        core = set(tasks[r.task].core_criteria) if r.task in tasks else set()
        lines.append(f"| {markdown_cell(r.id)} | {r.task or '-'} | {r.verdict} | {score} | {r.run_status} | "
                     + " | ".join(marks) + f" | {markdown_cell(scorecard.reason(r, core)) or '-'} |")
    return "\n".join(lines) + "\n"


