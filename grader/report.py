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

from grader import __version__, scorecard
from grader.core.paths import atomic_write, page_name
from grader.core.records import CRITERION_IDS, SCHEMA_VERSION
from grader.core.sanitize import clean

TEMPLATES = Environment(loader=PackageLoader("grader", "templates"), autoescape=select_autoescape(["html", "j2"]))


def grader_revision() -> dict[str, str | bool | None]:
    """The grader's version and, when it runs from a git checkout, its commit and whether the tree has edits."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), *argv],
                                  capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = None if commit is None else bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"version": __version__, "commit": commit, "modified": dirty}


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
    return [] if a == b else [f"{where}: {str(a)[:100]!r} != {str(b)[:100]!r}"]


def results_document(results: list[dict], run_info: dict) -> dict:
    """The results.json document (see ``comparable`` for the fields that vary between identical runs)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "grader_version": __version__,
        "run": run_info,
        "candidates": sorted(results, key=lambda r: r["id"]),
    }


def write_results_json(out: Path, results: list[dict], run_info: dict) -> Path:
    path = out / "results.json"
    atomic_write(path, json.dumps(results_document(results, run_info), indent=2, sort_keys=True) + "\n")
    return path


def _by_task(results: list[dict]) -> dict[str, list[dict]]:
    grouped = defaultdict(list)
    for r in sorted(results, key=lambda r: r["id"]):
        grouped[r["task"] or "(no task)"].append(r)
    return dict(sorted(grouped.items()))


STATIC_FILES = ("scorecard.css", "scorecard.js")


def copy_static(out: Path) -> None:
    """The pages' stylesheet and script, from the package into ``out/static`` (the pages load nothing else)."""
    shipped = resources.files("grader") / "static"
    for name in STATIC_FILES:
        atomic_write(out / "static" / name, (shipped / name).read_text(encoding="utf-8"))


def write_html(out: Path, results: list[dict], run_info: dict, diffs: dict[str, str],
               judge: dict[str, str] | None = None) -> Path:
    """The scorecards: ``index.html`` and one page per candidate under ``candidates/`` (view model:
    ``grader.scorecard``). ``judge`` maps candidate ids to a judge's overall verdict, shown beside the grader's."""
    tasks = scorecard.known_tasks()
    pages = out / "candidates"
    for r in results:
        shown_diff = clean(diffs.get(r["id"], "").replace("\r\n", "\n"), limit=None)
        view = scorecard.build_candidate(r, shown_diff, judge, tasks)
        html = TEMPLATES.get_template("candidate.html.j2").render(page=view, r=r, run=run_info, static="../static/")
        # The page's view reads names out of the diff itself (a quoted name can decode to bytes that are not
        # UTF-8): what reaches the file is cleaned, so any page can be written and shows no control character.
        atomic_write(pages / page_name(r["id"]), clean(html, limit=None))
    return write_index(out, results, run_info, judge)


def write_index(out: Path, results: list[dict], run_info: dict, judge: dict[str, str] | None = None) -> Path:
    """``index.html`` and the static files it loads, over pages already written under ``out/candidates``."""
    copy_static(out)
    index = scorecard.build_index(results, page_name, judge, scorecard.known_tasks())
    atomic_write(out / "index.html", clean(TEMPLATES.get_template("index.html.j2").render(
        index=index, run=run_info, static="static/"), limit=None))
    return out / "index.html"


def _seconds(r: dict) -> str:
    return f"{sum(v for k, v in r.get('timings', {}).items() if k.endswith('_s')):.2f}"


def write_junit(path: Path, results: list[dict]) -> Path:
    """Per candidate one testcase for its verdict and one per criterion (named with its title): met passes,
    partial/unmet fail, not_evaluated is skipped, and the checks of a criterion that did not run are a skipped
    testcase of their own. ``error`` only where grading broke; a run that did not complete says so."""
    suites = ET.Element("testsuites", name="grader")
    for task, group in _by_task(results).items():
        suite = ET.SubElement(suites, "testsuite", name=clean(task))
        counts = defaultdict(int)

        # ElementTree writes any character, XML 1.0 forbids some: every text is cleaned again here (clean text
        # passes unchanged), so a record from an older store cannot make the file ill-formed either.
        def case(classname: str, name: str, seconds: str = "0") -> ET.Element:
            counts["tests"] += 1
            return ET.SubElement(suite, "testcase", classname=clean(classname), name=clean(name), time=seconds)

        def mark(element: ET.Element, kind: str, message: str, text: str = "") -> None:
            counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[kind]] += 1
            ET.SubElement(element, kind, message=clean(message, limit=500)).text = clean(text) or None

        for r in group:
            classname = f"{task}.{r['id']}"
            state = r.get("run_status", "complete")
            verdict = case(classname, "verdict", _seconds(r))
            headline = f"{r['verdict']}" + ("" if r["score"] is None else f" ({r['score']:.2f})") + \
                ("" if state == "complete" else f"; run {state}")
            if r["verdict"] == "error":
                mark(verdict, "error", r.get("error") or "not graded", r.get("summary", ""))
            elif r["verdict"] == "no_diff":
                mark(verdict, "skipped", "no diff to grade")
            elif r["verdict"] != "full":
                mark(verdict, "failure", headline, r.get("summary", ""))
            for cid in CRITERION_IDS:
                crit = r["criteria"].get(cid)
                if crit is None:
                    continue
                element = case(classname, f"{cid} {crit['title']}")
                if r["verdict"] == "error" or crit["status"] == "not_evaluated":
                    mark(element, "skipped", crit["rationale"])
                elif crit["status"] != "met":
                    mark(element, "failure", f"{crit['status']} ({crit['score']})", crit["rationale"])
                for why, n in sorted(crit.get("not_run", {}).items()) if crit["status"] != "not_evaluated" else ():
                    mark(case(classname, f"{cid} {crit['title']}: {n} {why} check(s) not run"), "skipped",
                         f"{n} check(s) of {cid} did not run here ({why})")
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.indent(suites)
    atomic_write(path, ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n")
    return path


def markdown_summary(results: list[dict]) -> str:
    lines = ["| candidate | task | verdict | score | run | " + " | ".join(CRITERION_IDS) + " |",
             "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in CRITERION_IDS) + " |"]
    for r in sorted(results, key=lambda r: r["id"]):
        marks = [r["criteria"].get(c, {}).get("status", "-") for c in CRITERION_IDS]
        score = "-" if r["score"] is None else f"{r['score']:.2f}"
        lines.append(f"| {r['id']} | {r['task'] or '-'} | {r['verdict']} | {score} | {r.get('run_status', '-')} | "
                     + " | ".join(marks) + " |")
    return "\n".join(lines) + "\n"


