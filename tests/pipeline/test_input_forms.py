"""Diffs as people have them: encodings (UTF-8 with or without a byte-order mark, UTF-16, a file that claims UTF-16
and is not), CRLF, ``diff -u``/``diff -ru`` between release folders and diffs without ``a/`` (the strip depth found
from the paths that exist, the task inferred after stripping), ``git format-patch`` mails, and a directory's entries
that are not regular files (named, never dropped)."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

from conftest import lines_file
from grader.pipeline.apply import apply_diff
from grader.core.rubric import all_base_recipes
from grader.pipeline.diffparse import header_path, parse_sections, quote_c, restripped, strip_depth, unquote_c
from grader.pipeline.ingest import IngestError, infer_task, ingest, scan_directory

A = lines_file(40)
NEW_A = A.replace("line 10\n", "LINE TEN\n")


def plain_diff(old_name: str, new_name: str, old: str, new: str, stamp: str = "") -> str:
    """A unified diff as ``diff -u`` writes it (no ``diff --git`` line; a timestamp after a tab when given)."""
    def lines(text):
        return re.findall(r"[^\n]*\n|[^\n]+$", text)

    return "".join(difflib.unified_diff(lines(old), lines(new), old_name, new_name, stamp, stamp))


@pytest.fixture
def tree(make_git_tree) -> Path:
    return make_git_tree({"vllm/lora/peft_helper.py": A, "vllm/__init__.py": "", "setup.py": "x = 1\n"})


def applied(report, tree: Path) -> bool:
    return report.status == "applied" and (tree / "vllm/lora/peft_helper.py").read_text() == NEW_A


# --- strip depth ---------------------------------------------------------------------------------------------


def test_a_diff_between_release_folders_applies_with_its_depth_found(tree):
    diff = plain_diff("vllm-0.25.0/vllm/lora/peft_helper.py", "vllm-0.26.0/vllm/lora/peft_helper.py", A, NEW_A,
                      "\t2025-01-01 00:00:00.000000000 +0000")
    report = apply_diff("diff -ru vllm-0.25.0/vllm/lora/peft_helper.py vllm-0.26.0/vllm/lora/peft_helper.py\n"
                        + diff + "Only in vllm-0.26.0/vllm: extra.py\n", tree)
    assert applied(report, tree), report
    assert [f.path for f in report.files] == ["vllm/lora/peft_helper.py"]


def test_a_diff_without_a_prefix_applies_at_depth_zero(tree):
    diff = plain_diff("vllm/lora/peft_helper.py", "vllm/lora/peft_helper.py", A, NEW_A)
    report = apply_diff(diff, tree)
    assert applied(report, tree), report


def test_a_git_diff_with_no_prefix_adding_a_file_lands_in_its_folder(tree):
    diff = ("diff --git vllm/lora/new.py vllm/lora/new.py\nnew file mode 100644\n--- /dev/null\n"
            "+++ vllm/lora/new.py\n@@ -0,0 +1 @@\n+y = 2\n")
    report = apply_diff(diff, tree)
    assert report.status == "applied", report
    assert (tree / "vllm/lora/new.py").read_text() == "y = 2\n"


def test_git_diffs_keep_depth_one():
    sections = parse_sections("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert strip_depth(sections, {"vllm/x.py"}.__contains__, {"vllm"}.__contains__) == 1
    # Nothing known: git's depth.
    assert strip_depth(sections, lambda p: False, lambda p: False) == 1


def test_a_stripped_name_still_may_not_leave_the_tree(tree):
    diff = plain_diff("x/../../outside.py", "x/../../outside.py", "a\n", "b\n")
    assert apply_diff(diff, tree).status == "rejected"


@pytest.mark.parametrize("form", ["release", "no-prefix"])
def test_the_task_is_inferred_after_stripping(form):
    task, recipe = next((t, r) for t, r in sorted(all_base_recipes().items()) if r.blobs)
    path = sorted(recipe.blobs)[0]
    names = ((f"vllm-0.25.0/{path}", f"vllm-0.26.0/{path}") if form == "release" else (path, path))
    diff = plain_diff(*names, "x = 1\n", "x = 2\n")
    inferred, reason = infer_task(diff)
    matches = [t for t, r in all_base_recipes().items() if path in r.blobs]
    assert inferred == task if len(matches) == 1 else inferred is None and "ambiguous" in reason, reason


# --- encodings and line ends ---------------------------------------------------------------------------------


GIT_DIFF = ("diff --git a/vllm/lora/peft_helper.py b/vllm/lora/peft_helper.py\n"
            + plain_diff("a/vllm/lora/peft_helper.py", "b/vllm/lora/peft_helper.py", A, NEW_A))


@pytest.mark.parametrize("encoding,mark", [("utf-8", b""), ("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                           ("utf-16-be", b"\xfe\xff"), ("utf-16-le", b""), ("utf-16-be", b"")])
@pytest.mark.parametrize("crlf", [False, True])
def test_a_diff_in_any_common_encoding_is_read_as_its_text(tmp_path, tree, encoding, mark, crlf):
    text = GIT_DIFF.replace("\n", "\r\n") if crlf else GIT_DIFF
    path = tmp_path / "cand.diff"
    path.write_bytes(mark + text.encode(encoding))
    [candidate] = ingest([path], task="some-task")
    assert candidate.ingest_error is None
    assert candidate.diff == text
    assert applied(apply_diff(candidate.diff, tree), tree)


def test_a_file_that_is_not_the_utf16_it_shows_is_refused_naming_the_encoding(tmp_path):
    path = tmp_path / "cand.diff"
    path.write_bytes(b"\xff\xfe" + "diff --git a/x b/x\n".encode("utf-16-le") + b"\x00\xd8")  # a lone surrogate
    [candidate] = ingest([path], task="some-task")
    assert "UTF-16 (little-endian)" in candidate.ingest_error and str(path) in candidate.ingest_error


def test_a_bundle_with_a_byte_order_mark_is_still_a_bundle(tmp_path):
    from grader.pipeline.ingest import is_bundle
    bundle = tmp_path / "b.txt"
    bundle.write_bytes(b"\xef\xbb\xbfhttps://github.com/vllm-project/vllm\n\nA verdict.\n\n" + GIT_DIFF.encode())
    assert is_bundle(bundle)
    bundle.write_bytes("https://github.com/vllm-project/vllm\n\nA verdict.\n\n".encode("utf-16") + b"")
    assert is_bundle(bundle)


# --- git format-patch mails ----------------------------------------------------------------------------------


def test_a_format_patch_mail_applies(tmp_path, tree):
    mail = ("From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
            "From: A Person <a@example.com>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\n"
            "Subject: [PATCH] lora: tenth line\n\nWhy it changes.\n---\n vllm/lora/peft_helper.py | 2 +-\n"
            " 1 file changed, 1 insertion(+), 1 deletion(-)\n\n" + GIT_DIFF + "-- \n2.39.5\n\n")
    path = tmp_path / "0001-lora-tenth-line.patch"
    path.write_text(mail)
    [candidate] = ingest([path], task="some-task")
    report = apply_diff(candidate.diff, tree)
    assert applied(report, tree), report
    assert [f.path for f in report.files] == ["vllm/lora/peft_helper.py"]


# --- a directory's entries that are not regular files --------------------------------------------------------


def test_a_directorys_fifo_and_broken_links_are_named_not_dropped(tmp_path):
    root = tmp_path / "cands"
    root.mkdir()
    (root / "good.diff").write_text(GIT_DIFF)
    os.mkfifo(root / "pipe.diff")
    os.symlink(root / "missing.diff", root / "dangling.diff")
    os.symlink(root / "loop.patch", root / "loop.patch")
    os.symlink("elsewhere", root / "dangling-folder")
    found = {c.id: c.ingest_error for c in scan_directory(root, task="some-task")}
    assert found["good"] is None
    assert "FIFO" in found["pipe"]
    assert "does not exist" in found["dangling"] and "does not exist" in found["dangling-folder"]
    assert "loop" in found["loop"]


def test_a_named_fifo_is_refused_with_its_kind(tmp_path):
    os.mkfifo(tmp_path / "pipe.diff")
    with pytest.raises(IngestError, match="FIFO"):
        ingest([tmp_path / "pipe.diff"])


def test_a_linked_folder_loop_is_walked_once(tmp_path):
    root = tmp_path / "cands"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "one.diff").write_text(GIT_DIFF)
    os.symlink(root, root / "sub" / "back")
    assert [c.id for c in scan_directory(root, task="t")] == ["sub/one"]


@pytest.mark.parametrize("names,depth", [
    (("/dev/null", "b/pkg/x.py"), 1),                           # a new file in a new folder: git's depth
    (("/dev/null", "vllm-0.26.0/vllm/newpkg/x.py"), 1),          # ... between release folders
    (("/dev/null", "vllm/newpkg/x.py"), 0),                      # ... without a/
    (("/dev/null", "new.py"), 0),                                # one component: nothing to strip
    (("vllm/lora/peft_helper.py", "vllm/lora/peft_helper.py"), 0),
    (("x/y/vllm/lora/peft_helper.py", "x/z/vllm/lora/peft_helper.py"), 2),
])
def test_the_strip_depth_of_new_and_changed_files(names, depth):
    sections = parse_sections(f"--- {names[0]}\n+++ {names[1]}\n@@ -0,0 +1 @@\n+y\n")
    files = {"vllm/lora/peft_helper.py", "vllm/__init__.py"}
    folders = {"vllm", "vllm/lora"}
    assert strip_depth(sections, files.__contains__, folders.__contains__) == depth


@pytest.mark.parametrize("name", ["vllm/plain.py", 'vllm/a"b.py', "vllm/back\\slash.py", "vllm/tab\there.py",
                                  b"vllm/\xffx.py".decode("utf-8", "surrogateescape"), "vllm/caf\u00e9.py"])
def test_a_restripped_name_reads_back_as_itself(name):
    assert header_path(quote_c(name)) == name
    quoted = quote_c(f"vllm-0.25.0/{name}")
    [section] = parse_sections(f"--- {quoted}\n+++ {quoted}\n@@ -1 +1 @@\n-a\n+b\n")
    again = restripped(section, 1)
    assert (again.old_path, again.new_path) == (name, name)
    assert unquote_c(quote_c(name))[0] == name


def test_a_git_diff_keeps_depth_one_even_where_a_deeper_one_names_known_files():
    sections = parse_sections("diff --git a/tests/vllm/x.py b/tests/vllm/x.py\n--- a/tests/vllm/x.py\n"
                              "+++ b/tests/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert strip_depth(sections, {"vllm/x.py"}.__contains__, {"vllm", "tests"}.__contains__) == 1
