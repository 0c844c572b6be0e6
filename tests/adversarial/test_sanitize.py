"""Any byte a candidate chooses is data: hostile strings through the sanitiser, the reports, the terminal, ingestion,
apply, and (slow) real grading with the evidence cache replaying them."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from grader.drive import commands
from grader.pipeline.apply import apply_diff
from grader.core.records import (ApplyReport, Candidate, CandidateResult, CriterionResult, EvidenceEntry, FileReport,
                                 HunkReport)
from grader.core.rubric import REPO_ROOT
from grader.core.sanitize import TEXT_LIMIT, clean, clean_apply_report, clean_bytes, is_clean
from grader.pipeline.ingest import ingest, unique_ids
from grader.core.records import Graded
from grader.reports.report import page_name, write_html, write_junit, write_results_json
from grader.reports.terminal import ProgressLines, observer_for, print_closing

from conftest import run_info

HOSTILE = ["lone \ud800 high", "low \udfff", "escaped byte \udcff", "nul \x00 here", "clear \x1b[2J screen",
           "del \x7f", "next line \x85 (C1)", "csi \x9b", "bell \x07 vt \x0b ff \x0c", "cr \r overwrite",
           "xml forbids \ufffe and \uffff", "rich markup [/] [bold red]x[/bold red]", "\x1b]0;title\x07",
           "ok: tab\tand newline\n"]
# What a terminal or an XML parser must never receive from a candidate.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


@pytest.mark.parametrize("text", HOSTILE)
def test_clean_text_is_safe_visible_and_stable(text):
    out = clean(text)
    assert is_clean(out) and not CONTROL.search(out)
    out.encode("utf-8")  # no surrogate survives
    assert clean(out) == out
    assert "\n" not in out or "\n" in text


def test_clean_says_what_was_there():
    assert clean("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert clean("x\udcffy") == "x\\xffy"  # a byte that was not UTF-8 shows as that byte
    assert clean("\ud800") == "\\ud800"
    assert clean_bytes(b"caf\xc3\xa9 \xff") == "caf\u00e9 \\xff"
    assert clean("tab\tnew\nline") == "tab\tnew\nline"


def test_clean_caps_length_and_says_so():
    out = clean("x" * (TEXT_LIMIT * 2))
    assert len(out) <= TEXT_LIMIT and "more characters cut" in out and clean(out) == out


def hostile_result(cid: str) -> CandidateResult:
    """A result whose every candidate-chosen field holds the whole hostile corpus, as an older store or a bug
    upstream could hand the writers."""
    text = " | ".join(HOSTILE)
    criteria = {c: CriterionResult(c, f"title {c}", 0.0, "unmet", text,
                                   [EvidenceEntry(f"t.py::test_{c}", "failed", 1.0, text, [], 0.1, text)])
                for c in ("c1", "c2")}
    apply = ApplyReport("applied", "git apply", [FileReport(f"vllm/{text}.py", "added",
                                                            [HunkReport("@@ -0,0 +1 @@", "applied", text)])],
                        message=text, neutralized=[f"{text}/conftest.py"])
    return CandidateResult(cid, "xpu-kv-cache-dtypes", text, "fail", 0.0, criteria, apply, text,
                           reference_summary=text)


HOSTILE_DIFF = ('diff --git "a/vllm/x\\377\\033[2J.py" "b/vllm/x\\377\\033[2J.py"\nnew file mode 100644\n'
                '--- /dev/null\n+++ "b/vllm/x\\377\\033[2J.py"\n@@ -0,0 +1 @@\n+raise RuntimeError("\\ud800")\n')


def test_junit_is_well_formed_whatever_the_records_hold(tmp_path):
    path = write_junit(tmp_path / "junit.xml", [hostile_result("a \x1b[2J \ud800 id")])
    root = ET.parse(path).getroot()  # ill-formed XML raises here
    texts = [v for e in root.iter() for v in [*e.attrib.values(), e.text or ""]]
    assert texts and not any(CONTROL.search(t) for t in texts)
    assert any("\\x1b[2J" in t for t in texts), "the escape is shown, not dropped"


def test_pages_and_results_are_written_whatever_the_records_and_diff_hold(tmp_path):
    results = [hostile_result("a \x1b[2J \ud800 id")]
    write_results_json(tmp_path, results, run_info())
    index = write_html(tmp_path, results, run_info(), {results[0].id: HOSTILE_DIFF})
    pages = [index, *sorted((tmp_path / "candidates").glob("*.html"))]
    assert len(pages) == 2
    for page in pages:
        assert not CONTROL.search(page.read_text(encoding="utf-8"))


def test_terminal_prints_no_control_character_from_a_candidate():
    records = [replace(hostile_result(f"id {text}"), id=f"id {text}") for text in HOSTILE]
    plain, tty = io.StringIO(), type("Tty", (io.StringIO,), {"isatty": lambda self: True})()
    for stream in (plain, tty):
        with observer_for(stream, len(records)) as observer:
            for n, rec in enumerate(records, 1):
                observer.graded(Graded(Candidate(rec.id, "x.diff", "+x\n", rec.task), rec), n, len(records))
        print_closing(records, f"2: broken for {records[0].id}", stream)
    assert isinstance(observer_for(plain, 1).__enter__(), ProgressLines)
    for stream in (plain, tty):
        # rich draws with its own few sequences (colour, hide the cursor, erase and move up a line, CR): strip
        # exactly those; any other control character left came from a candidate.
        shown = stream.getvalue() if stream is plain else \
            re.sub(r"\x1b\[(?:[0-9;]*m|\?25[lh]|2K|\d*A)|\r", "", stream.getvalue())
        assert not CONTROL.search(shown), repr(shown[max(0, CONTROL.search(shown).start() - 40):][:80])
        assert "\\x1b[2J" in shown and "[/]" in shown


def test_apply_report_names_are_cleaned_once_and_git_gets_the_bytes(make_git_tree):
    tree = make_git_tree({"a.py": "x = 1\n"})
    diff = ('diff --git "a/pkg/x\\377.py" "b/pkg/x\\377.py"\nnew file mode 100644\n--- /dev/null\n'
            '+++ "b/pkg/x\\377.py"\n@@ -0,0 +1 @@\n+X = 1\n')
    report = apply_diff(diff, tree, contained=False)
    assert report.status == "applied", report.message
    assert (tree / "pkg").joinpath(b"x\xff.py".decode("utf-8", "surrogateescape")).read_text() == "X = 1\n"
    cleaned = clean_apply_report(report)
    assert cleaned.files[0].path == "pkg/x\\xff.py" and cleaned.tree_id == report.tree_id
    json.dumps(cleaned.files[0].path).encode("utf-8")


def test_raw_bytes_that_are_not_utf8_are_graded_as_data_not_an_ingest_error(tmp_path):
    folder = tmp_path / "xpu-kv-cache-dtypes"
    folder.mkdir()
    (folder / "raw.diff").write_bytes(b"diff --git a/vllm/x\xff.py b/vllm/x\xff.py\nnew file mode 100644\n"
                                      b"--- /dev/null\n+++ b/vllm/x\xff.py\n@@ -0,0 +1 @@\n+X = 1\n")
    (folder / b"esc\x1b[2J.diff".decode()).write_bytes(b"")
    found = {c.id: c for c in ingest([tmp_path])}
    raw = found["xpu-kv-cache-dtypes/raw"]
    assert raw.ingest_error is None and "\udcff" in raw.diff  # git will get the byte back
    assert "xpu-kv-cache-dtypes/esc\\x1b[2J" in found
    assert all(is_clean(c.id) and is_clean(c.source) and is_clean(c.task_reason) for c in found.values())


def test_repeated_ids_are_made_unique_even_when_a_suffixed_id_exists():
    ids = [c.id for c in unique_ids([Candidate(i, "s", "") for i in ("x", "x", "x~2", "x~2")])]
    assert len(set(ids)) == 4 and ids[0] == "x" and ids[2] == "x~2"
    assert len({page_name(i) for i in ids}) == 4


def test_page_names_are_injective_on_ids_that_share_surrogateescape_bytes():
    # "é" and the two escaped bytes of its UTF-8 encoding are different ids with the same surrogateescape bytes.
    assert page_name("\u00e9") != page_name("\udcc3\udca9")


def test_a_failing_report_is_named_and_the_others_are_still_written(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated writer bug")

    monkeypatch.setattr(commands, "write_html", broken)
    args = argparse.Namespace(out=tmp_path / "out", junit=tmp_path / "junit.xml", fail_under=None)
    failed = commands.write_reports(args, [hostile_result("c")], run_info(), {}, None)
    assert failed == ["the HTML scorecards"]
    assert (tmp_path / "out" / "results.json").is_file() and (tmp_path / "junit.xml").is_file()
    assert "writing the HTML scorecards failed" in capsys.readouterr().err


BASE_STATUSES = {"c1": "unmet", "c2": "unmet", "c3": "met", "c4": "met", "c5": "unmet"}


def _hostile_corpus(folder: Path) -> None:
    from grader.drive.one_candidate import BaseCache
    from grader.core.rubric import all_tasks
    import difflib

    base = BaseCache().get(all_tasks()["xpu-kv-cache-dtypes"])
    target = "vllm/__init__.py"
    old = (base.path / target).read_text()
    raising = old + '\nraise RuntimeError("hostile \\ud800 \\udcff \\x00 \\x1b[2J \\x7f \\x85 \\ufffe end")\n'
    body = "".join(difflib.unified_diff(old.splitlines(True), raising.splitlines(True), f"a/{target}", f"b/{target}"))
    (folder / "raises-hostile.diff").write_text(f"diff --git a/{target} b/{target}\n{body}")
    (folder / "quoted-name.diff").write_text('diff --git "a/vllm/x\\377.py" "b/vllm/x\\377.py"\n'
                                             'new file mode 100644\n--- /dev/null\n+++ "b/vllm/x\\377.py"\n'
                                             '@@ -0,0 +1 @@\n+X = 1\n')
    (folder / "raw-name.diff").write_bytes(b"diff --git a/vllm/y\xfe.py b/vllm/y\xfe.py\nnew file mode 100644\n"
                                           b"--- /dev/null\n+++ b/vllm/y\xfe.py\n@@ -0,0 +1 @@\n+Y = 1\n")
    (folder / "escape-in-name.diff").write_text('diff --git "a/vllm/z\\033[2J.py" "b/vllm/z\\033[2J.py"\n'
                                                'new file mode 100644\n--- /dev/null\n+++ "b/vllm/z\\033[2J.py"\n'
                                                '@@ -0,0 +1 @@\n+Z = 1\n')
    (folder / "only-conftest.diff").write_text("diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n"
                                               "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n")


@pytest.mark.slow
def test_hostile_bytes_through_real_grading_and_the_evidence_cache_replay(tmp_path):
    """Graded twice through the CLI: the second run replays the evidence cache. Both exit 0 with every report
    written, junit.xml well-formed and no control character on the terminal; the names are data."""
    folder = tmp_path / "in" / "xpu-kv-cache-dtypes"
    folder.mkdir(parents=True)
    _hostile_corpus(folder)
    runs = []
    for n in (1, 2):
        out = tmp_path / f"out{n}"
        done = subprocess.run([sys.executable, "grade.py", str(tmp_path / "in"), "--out", str(out), "--jobs", "1",
                               "--gpu", "off", "--junit", str(out / "junit.xml")], cwd=REPO_ROOT, capture_output=True,
                              text=True, errors="surrogateescape", timeout=1200)
        assert done.returncode in (0, 1), done.stderr[-3000:]  # graded, none broke (the base may be a fail)
        assert not CONTROL.search(done.stderr + done.stdout), repr(CONTROL.search(done.stderr))
        ET.parse(out / "junit.xml")
        assert len(list((out / "candidates").glob("*.html"))) == 5
        runs.append({r["id"].rsplit("/", 1)[-1]: r for r in json.loads((out / "results.json").read_text())["candidates"]})
    assert "evidence cached" in done.stderr
    for results in runs:
        statuses = {name: {c: v["status"] for c, v in r["criteria"].items()} for name, r in results.items()}
        assert statuses["quoted-name"] == statuses["raw-name"] == statuses["only-conftest"] == BASE_STATUSES
        assert results["escape-in-name"]["apply"]["status"] == "rejected"
        assert "\\x1b" in results["escape-in-name"]["apply"]["message"]
        assert results["only-conftest"]["apply"]["neutralized"] == ["conftest.py"]
        messages = [e.get("message", "") for c in results["raises-hostile"]["criteria"].values() for e in c["evidence"]]
        assert any("\\x1b[2J" in m and "\\ud800" in m for m in messages)
        assert all(r["verdict"] == "fail" for r in results.values())
