"""Fuzzing ingestion and application with malformed diffs: nothing may raise, every result has a valid status.

Diffs are assembled from pieces real candidates contain (git and plain headers, hunks, renames, deletions,
mode-only changes, binary markers, CRLF, missing final newlines, cut previews) and mutated, plus raw random
bytes. Application runs on a tiny git tree copied fresh for every example; nothing may appear outside it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.pipeline import apply as apply_mod
from grader.pipeline.ingest import infer_task, parse_bundle
from grader.core.records import ApplyStatus, HunkStatus

APPLY_STATUSES = set(typing.get_args(ApplyStatus))
HUNK_STATUSES = set(typing.get_args(HunkStatus))
CHANGES = {"added", "deleted", "renamed", "modified"}
FILES = {"vllm/a.py": "".join(f"line {i}\n" for i in range(1, 30)), "vllm/b.py": "x = 1\ny = 2\n",
         "README.md": "hello\n"}
PATHS = ["vllm/a.py", "vllm/b.py", "README.md", "vllm/new.py", "../escape.py", "/etc/passwd", "a b.py",
         "vllm/sitecustomize.py", "conftest.py", "x.pth", "vllm/../../up.py", "~/.bashrc", "", "é/ü.py"]
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _hunk(draw) -> str:
    old_start = draw(st.integers(0, 40))
    old_len = draw(st.integers(0, 4))
    new_len = draw(st.integers(0, 4))
    header = draw(st.sampled_from([
        f"@@ -{old_start},{old_len} +{old_start},{new_len} @@",
        f"@@ -{old_start} +{old_start} @@ def f():",
        "@@ -1,3 +1,3 @@", "@@ garbage @@", "@@ -a,b +c,d @@", "@@ -99999999999999999999,1 +1 @@"]))
    body = draw(st.lists(st.one_of(
        st.sampled_from([f" line {old_start + 1}", f"-line {old_start + 1}", "+added", "\\ No newline at end of file",
                         "", " ", "-x = 1", "+x = 2", "+\t\x00nul", "+" + "y" * 300]),
        st.text(max_size=20).map(lambda t: draw(st.sampled_from([" ", "-", "+"])) + t)), max_size=8))
    return "\n".join([header, *body])


@st.composite
def diffs(draw) -> str:
    sections = []
    for _ in range(draw(st.integers(0, 3))):
        old, new = draw(st.sampled_from(PATHS)), draw(st.sampled_from(PATHS))
        style = draw(st.sampled_from(["git", "plain", "rename", "delete", "new", "mode", "binary", "symlink", "cut"]))
        lines = []
        if style != "plain":
            lines.append(f"diff --git a/{old} b/{new}")
        if style == "rename":
            lines += [f"similarity index {draw(st.integers(0, 100))}%", f"rename from {old}", f"rename to {new}"]
        elif style == "delete":
            lines += ["deleted file mode 100644", "index 1234567..0000000"]
        elif style == "new":
            lines += ["new file mode 100644", "index 0000000..1234567"]
        elif style == "mode":
            lines += ["old mode 100644", "new mode 100755"]
        elif style == "symlink":
            lines += ["new file mode 120000"]
        elif style == "binary":
            lines += ["index 1234567..89abcde 100644", f"Binary files a/{old} and b/{new} differ"]
            if draw(st.booleans()):
                lines += ["GIT binary patch", "literal 4", "zcmZ?wbhEHb", ""]
        else:
            lines.append(f"index {draw(st.sampled_from(['320b7aa..476c9da 100644', 'zzz', '1234567..89abcde']))}")
        if style not in ("mode", "binary", "rename") or draw(st.booleans()):
            lines += [f"--- {'/dev/null' if style == 'new' else 'a/' + old}",
                      f"+++ {'/dev/null' if style == 'delete' else 'b/' + new}"]
            lines += [_hunk(draw) for _ in range(draw(st.integers(0 if style == "cut" else 1, 3)))]
        sections.append("\n".join(lines))
    text = "\n".join(sections)
    if draw(st.booleans()):
        text += "\n"
    mutation = draw(st.sampled_from(["none", "crlf", "truncate", "insert", "huge", "noise"]))
    if mutation == "crlf":
        text = text.replace("\n", "\r\n")
    elif mutation == "truncate" and text:
        text = text[:draw(st.integers(0, len(text)))]
    elif mutation == "insert" and text:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=30)) + text[at:]
    elif mutation == "huge":
        text += "\n+" + "z" * (apply_mod.MAX_DIFF_BYTES + 10) + "\n"
    elif mutation == "noise":
        text += draw(st.binary(max_size=200)).decode("utf-8", "replace")
    return text


any_diff = st.one_of(diffs(), st.binary(max_size=2000).map(lambda b: b.decode("utf-8", "surrogateescape")),
                     st.text(max_size=500))


@SETTINGS
@given(diff=any_diff, paragraph=st.text(max_size=80))
def test_ingest_never_raises(diff, paragraph):
    task, reason = infer_task(diff)
    assert task is None or isinstance(task, str)
    assert isinstance(reason, str)
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bundle.txt"
        bundle.write_bytes(f"https://example.invalid/repo\n{paragraph}\n\n{diff}\n\nno diff captured (gone)\n"
                           .encode("utf-8", "surrogateescape"))
        candidates = parse_bundle(bundle)
    for candidate in candidates:
        assert isinstance(candidate.diff, str) and candidate.id.startswith("bundle-")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "template"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True, capture_output=True)
    return root


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(diff=any_diff)
def test_apply_never_raises_and_stays_in_the_tree(template, diff):
    diff = diff.encode("utf-8", "replace").decode("utf-8")  # what ingestion hands on (valid UTF-8 text)
    with tempfile.TemporaryDirectory() as tmp:
        outer = Path(tmp)
        tree = outer / "box" / "tree"
        shutil.copytree(template, tree, symlinks=True)
        before = sorted(p.relative_to(outer).as_posix() for p in outer.rglob("*") if ".git" not in p.parts)
        report = apply_mod.apply_diff(diff, tree)
        assert report.status in APPLY_STATUSES
        for file in report.files:
            assert file.change in CHANGES
            assert all(h.status in HUNK_STATUSES for h in file.hunks)
        if report.status in ("rejected", "failed", "empty"):
            assert report.message
        outside = sorted(p.relative_to(outer).as_posix() for p in outer.rglob("*")
                         if ".git" not in p.parts and not p.is_relative_to(tree))
        assert outside == [q for q in before if not (outer / q).is_relative_to(tree)]
