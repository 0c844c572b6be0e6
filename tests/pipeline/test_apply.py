"""Application of candidate diffs on a tiny synthetic tree: methods, per-hunk outcomes, rejections."""

from __future__ import annotations

import difflib
import os
import shutil
import re
import subprocess
from pathlib import Path

import pytest

from conftest import lines_file
from grader.pipeline.apply import MAX_DIFF_BYTES, applied_tree, apply_diff, make_tree, scratch_root
from grader.pipeline.checkout import BuiltBase

A = lines_file(40)
B = lines_file(20, "b")


def udiff(path: str, old: str, new: str, n: int = 3) -> str:
    """A git-style unified diff of one file from ``old`` to ``new``."""
    def lines(text):  # split at "\n" only, unlike str.splitlines
        return re.findall(r"[^\n]*\n|[^\n]+$", text)

    body = difflib.unified_diff(lines(old), lines(new), f"a/{path}", f"b/{path}", n=n)
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def replace(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.fixture
def tree(make_git_tree) -> Path:
    return make_git_tree({"a.py": A, "b.py": B, "pkg/__init__.py": "", "pkg/mod.py": "x = 1\n"})


def statuses(report) -> list[str]:
    return [h.status for f in report.files for h in f.hunks]


# --- methods and per-hunk outcomes ---------------------------------------------------------------------------


def test_strict_apply(tree):
    diff = udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n"))
    report = apply_diff(diff, tree)
    assert (report.status, report.method) == ("applied", "git apply")
    assert statuses(report) == ["applied"]
    assert report.files[0].path == "a.py" and report.files[0].change == "modified"
    assert "LINE TEN\n" in (tree / "a.py").read_text()
    assert report.hunks_applied == report.hunks_total == 1


def test_shifted_context_applies_and_reports_how(tree):
    # The diff was made against a file without the five lines the tree has at the top.
    shifted = lines_file(5, "head") + A
    (tree / "a.py").write_text(shifted)
    diff = udiff("a.py", A, replace(A, "line 30\n", "LINE THIRTY\n"))
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert (tree / "a.py").read_text() == replace(shifted, "line 30\n", "LINE THIRTY\n")
    [hunk] = report.files[0].hunks
    # Either the strict method reports the offset, or a relaxed method is recorded.
    assert (report.method == "git apply" and hunk.status == "offset" and "offset 5" in hunk.detail) or (
        report.method != "git apply")


def test_hunk_needing_fuzz_uses_patch(tree):
    diff = udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n"))
    # Every leading context line differs in the tree: git refuses, patch --fuzz=3 places it.
    (tree / "a.py").write_text(A.replace("line 7\n", "seven\n").replace("line 8\n", "eight\n")
                               .replace("line 9\n", "nine\n"))
    report = apply_diff(diff, tree)
    assert (report.status, report.method) == ("applied", "patch --fuzz=3")
    [hunk] = report.files[0].hunks
    assert hunk.status == "fuzz" and "fuzz" in hunk.detail
    assert "LINE TEN\n" in (tree / "a.py").read_text()


def test_one_hunk_fails_other_applies_is_partial(tree):
    good = udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n"))
    bad = udiff("b.py", replace(B, "b 5\n", "not in the tree\n"), replace(B, "b 5\n", "B FIVE\n"), n=0)
    report = apply_diff(good + bad, tree)
    assert report.status == "partial" and report.method == "patch --fuzz=3"
    by_path = {f.path: f for f in report.files}
    assert [h.status for h in by_path["a.py"].hunks] == ["applied"]
    [failed] = by_path["b.py"].hunks
    assert failed.status == "failed" and failed.detail  # the reason is given
    assert "LINE TEN\n" in (tree / "a.py").read_text()
    assert (tree / "b.py").read_text() == B


def test_two_hunks_same_file_one_fails(tree):
    new = replace(replace(A, "line 5\n", "LINE FIVE\n"), "line 35\n", "LINE 35\n")
    diff = udiff("a.py", A, new)
    assert diff.count("@@ -") == 2
    (tree / "a.py").write_text(replace(A, "line 35\n", "something else\n"))
    report = apply_diff(diff, tree)
    assert report.status == "partial"
    assert statuses(report) == ["applied", "failed"]
    assert report.files[0].hunks[1].detail
    assert "LINE FIVE\n" in (tree / "a.py").read_text()


def test_nothing_applies_is_failed(tree):
    diff = udiff("b.py", replace(B, "b 5\n", "absent\n"), replace(B, "b 5\n", "B FIVE\n"), n=0)
    report = apply_diff(diff, tree)
    assert report.status == "failed" and report.method is None
    assert statuses(report) == ["failed"]
    assert report.message
    assert (tree / "b.py").read_text() == B


def test_missing_target_file_is_failed(tree):
    diff = udiff("nope.py", A, replace(A, "line 10\n", "X\n"))
    report = apply_diff(diff, tree)
    assert report.status == "failed"
    assert not (tree / "nope.py").exists()


def test_truncated_final_hunk(tree):
    first = udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n"))
    second = udiff("b.py", B, replace(B, "b 10\n", "B TEN\n"))
    cut = "\n".join((first + second).splitlines()[:-3]) + "\n"  # the preview stops inside b.py's hunk
    report = apply_diff(cut, tree)
    assert report.status == "partial" and report.truncated
    assert report.method == "git apply"
    by_path = {f.path: f for f in report.files}
    assert [h.status for h in by_path["a.py"].hunks] == ["applied"]
    [hunk] = by_path["b.py"].hunks
    assert hunk.status == "truncated"
    assert "LINE TEN\n" in (tree / "a.py").read_text()
    assert (tree / "b.py").read_text() == B


def test_all_hunks_truncated_grades_the_base(tree):
    diff = udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n"))
    cut = "\n".join(diff.splitlines()[:-2]) + "\n"
    report = apply_diff(cut, tree)
    assert report.status == "partial" and report.truncated and report.method is None
    assert statuses(report) == ["truncated"]
    assert "base" in report.message
    assert (tree / "a.py").read_text() == A


def test_cut_inside_a_file_header_is_truncated(tree):
    first = udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n"))
    cut = first + "diff --git a/b.py b/b.py\nindex 1234567..89abcde 100644\n--- a/b.py\n"
    report = apply_diff(cut, tree)
    assert report.truncated and report.status == "partial"
    assert "LINE TEN\n" in (tree / "a.py").read_text()


@pytest.mark.parametrize("diff", ["", "   \n\n"])
def test_empty_diff(tree, diff):
    report = apply_diff(diff, tree)
    assert report.status == "empty" and report.files == []


def test_not_a_diff_is_failed(tree):
    report = apply_diff("this is prose, not a patch\n", tree)
    assert report.status == "failed" and "unified diff" in report.message


# --- rejections -------------------------------------------------------------------------------------------------

NEW_FILE = "diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1 @@\n+print('hi')\n"


@pytest.mark.parametrize("path", ["../evil.py", "pkg/../../evil.py", "~/evil.py"])
def test_dotdot_path_rejected(tree, path):
    report = apply_diff(NEW_FILE.format(p=path), tree)
    assert report.status == "rejected" and "outside the tree" in report.message and path in report.message
    assert not (tree.parent / "evil.py").exists()


@pytest.mark.parametrize("diff", [
    "--- /dev/null\n+++ {evil}\n@@ -0,0 +1 @@\n+x\n",
    "diff --git {evil} {evil}\nnew file mode 100644\n--- /dev/null\n+++ {evil}\n@@ -0,0 +1 @@\n+x\n",
])
def test_absolute_path_rejected(tree, diff):
    evil = str(tree.parent / "evil.py")
    report = apply_diff(diff.format(evil=evil), tree)
    assert report.status == "rejected" and "outside the tree" in report.message and evil in report.message
    assert not (tree.parent / "evil.py").exists()


@pytest.mark.parametrize("diff", [
    # the header names an escaping path while ---/+++ look harmless: tools differ in which name they use
    "diff --git a/../evil.py b/../evil.py\nnew file mode 100644\n--- /dev/null\n+++ b/ok.py\n@@ -0,0 +1 @@\n+x\n",
    "diff --git a/b.py b/c.py\nsimilarity index 100%\nrename from b.py\nrename to ../evil.py\n",
    "diff --git a/b.py b/c.py\nsimilarity index 100%\ncopy from b.py\ncopy to ../evil.py\n",
])
def test_escaping_name_anywhere_in_header_rejected(tree, diff):
    report = apply_diff(diff, tree)
    assert report.status == "rejected" and "../evil.py" in report.message
    assert not (tree.parent / "evil.py").exists() and not (tree / "ok.py").exists()


def test_symlink_creation_rejected(tree):
    diff = ("diff --git a/link b/link\nnew file mode 120000\nindex 0000000..1234567\n--- /dev/null\n"
            "+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n")
    report = apply_diff(diff, tree)
    assert report.status == "rejected" and "symbolic link" in report.message
    assert not os.path.lexists(tree / "link")


def test_mode_change_to_symlink_rejected(tree):
    diff = "diff --git a/b.py b/b.py\nold mode 100644\nnew mode 120000\n"
    report = apply_diff(diff, tree)
    assert report.status == "rejected" and "symbolic link" in report.message


def test_write_through_existing_symlink_rejected(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.py").write_text("x = 1\n")
    os.symlink(outside, tree / "escape")
    diff = udiff("escape/target.py", "x = 1\n", "x = 2\n")
    report = apply_diff(diff, tree)
    assert report.status == "rejected" and "escape/target.py" in report.message and "link" in report.message
    assert (outside / "target.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("path, words", [
    (".git/hooks/post-checkout", "git metadata"),
    (".git/config", "git metadata"),
    ("pkg/.GIT/x", "git metadata"),
    ("a\x00b.py", "control characters"),
    ("a\x1bb.py", "control characters"),
])
def test_git_metadata_and_control_characters_rejected(tree, path, words):
    report = apply_diff(NEW_FILE.format(p=path), tree)
    assert report.status == "rejected" and words in report.message
    assert not (tree / ".git" / "hooks" / "post-checkout").exists()


GIT_BINARY = ("diff --git a/blob.bin b/blob.bin\nnew file mode 100644\nindex 0000000..e69de29\n"
              "GIT binary patch\nliteral 3\nKcmZ?wWB>pF01E&C\n\nliteral 0\nHcmV?d00001\n\n")
BINARY_DIFFER = ("diff --git a/img.png b/img.png\nindex 1234567..89abcde 100644\n"
                 "Binary files a/img.png and b/img.png differ\n")
TEXT_PART = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


@pytest.mark.parametrize("binary", [GIT_BINARY, BINARY_DIFFER], ids=["git-binary-patch", "binary-files-differ"])
def test_the_text_part_of_a_diff_with_binary_files_is_applied(tree, binary):
    report = apply_diff(binary + TEXT_PART, tree)
    assert report.status == "partial" and report.binary == [binary.split()[2][2:]]
    assert "binary files are not applied" in report.message
    assert (tree / "pkg" / "mod.py").read_text() == "x = 2\n"
    assert [f.path for f in report.files] == ["pkg/mod.py"] and statuses(report) == ["applied"]
    assert not (tree / "blob.bin").exists()


def test_a_diff_of_binary_files_only_is_not_applied(tree):
    report = apply_diff(GIT_BINARY + BINARY_DIFFER, tree)
    assert report.status == "failed" and report.binary == ["blob.bin", "img.png"]
    assert "only binary files" in report.message and not (tree / "blob.bin").exists()


def test_oversized_diff_rejected(tree):
    added = "".join(f"+{'x' * 99}\n" for _ in range(MAX_DIFF_BYTES // 100 + 10))
    n = added.count("\n")
    diff = f"diff --git a/big.py b/big.py\nnew file mode 100644\n--- /dev/null\n+++ b/big.py\n@@ -0,0 +1,{n} @@\n" + added
    report = apply_diff(diff, tree)
    assert report.status == "rejected" and "limit" in report.message and str(MAX_DIFF_BYTES) in report.message
    assert not (tree / "big.py").exists()


def test_diff_just_under_limit_is_not_rejected(tree):
    added = "".join(f"+{'x' * 99}\n" for _ in range(1000))
    diff = "diff --git a/big.py b/big.py\nnew file mode 100644\n--- /dev/null\n+++ b/big.py\n@@ -0,0 +1,1000 @@\n" + added
    report = apply_diff(diff, tree)
    assert report.status == "applied"


# --- self-executing files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["conftest.py", "pkg/conftest.py", "sitecustomize.py", "usercustomize.py",
                                  "x.pth", "pkg/evil.pth", "pytest.ini"])
def test_self_executing_files_dropped(tree, name):
    diff = NEW_FILE.format(p=name) + udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n"))
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert report.neutralized == [name]
    assert not (tree / name).exists()
    assert "LINE TEN\n" in (tree / "a.py").read_text()
    assert name not in [f.path for f in report.files]


def test_a_diff_of_only_self_executing_files_grades_the_base(tree):
    """The neutralised file simply does not land: the rest (nothing) is applied, so the base is what is graded
    (an apply failure would leave every criterion not evaluated)."""
    base_tree_id = applied_tree(tree)[0]
    report = apply_diff(NEW_FILE.format(p="conftest.py"), tree)
    assert report.status == "applied" and report.neutralized == ["conftest.py"]
    assert "not applied" in report.message and "base is graded" in report.message
    assert report.tree_id == base_tree_id
    assert not (tree / "conftest.py").exists()


def test_modified_existing_conftest_is_dropped(make_git_tree):
    tree = make_git_tree({"conftest.py": "x = 1\n", "a.py": A})
    diff = udiff("conftest.py", "x = 1\n", "import os; os.system('true')\n") + udiff(
        "a.py", A, replace(A, "line 2\n", "two\n"))
    report = apply_diff(diff, tree)
    assert report.neutralized == ["conftest.py"] and report.status == "applied"
    assert (tree / "conftest.py").read_text() == "x = 1\n"


# --- shapes of diffs: each applies correctly or is reported, never raises --------------------------------------


def test_new_file(tree):
    report = apply_diff(NEW_FILE.format(p="pkg/new.py"), tree)
    assert report.status == "applied" and report.files[0].change == "added"
    assert (tree / "pkg/new.py").read_text() == "print('hi')\n"


def test_crlf_diff_on_lf_tree(tree):
    diff = udiff("a.py", A, replace(A, "line 10\n", "LINE TEN\n")).replace("\n", "\r\n")
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert (tree / "a.py").read_bytes() == replace(A, "line 10\n", "LINE TEN\n").encode()


def test_crlf_file_in_tree(make_git_tree):
    old = A.replace("\n", "\r\n")
    tree = make_git_tree({"a.py": old})
    diff = udiff("a.py", old, replace(old, "line 10\r\n", "LINE TEN\r\n"))
    assert diff.startswith("diff --git a/a.py b/a.py\n") and "\r\n" in diff  # LF headers, CRLF content
    report = apply_diff(diff, tree)
    assert report.status == "applied", report.message
    assert (tree / "a.py").read_bytes() == replace(old, "line 10\r\n", "LINE TEN\r\n").encode()


def test_line_with_form_feed_and_line_separator(make_git_tree):
    old = "a = 1\n\x0c\nb = '\u2028'\nc = 3\n"
    tree = make_git_tree({"f.py": old})
    report = apply_diff(udiff("f.py", old, old.replace("c = 3", "c = 4")), tree)
    assert report.status == "applied", report.message
    assert (tree / "f.py").read_text() == old.replace("c = 3", "c = 4")


def test_no_newline_at_end_of_file(make_git_tree):
    old = "a\nb\nc"
    tree = make_git_tree({"c.py": old})
    diff = ("diff --git a/c.py b/c.py\n--- a/c.py\n+++ b/c.py\n@@ -1,3 +1,3 @@\n a\n b\n-c\n"
            "\\ No newline at end of file\n+C\n\\ No newline at end of file\n")
    report = apply_diff(diff, tree)
    assert report.status == "applied" and not report.truncated
    assert (tree / "c.py").read_text() == "a\nb\nC"


def test_adding_final_newline(make_git_tree):
    tree = make_git_tree({"c.py": "a\nb"})
    diff = ("diff --git a/c.py b/c.py\n--- a/c.py\n+++ b/c.py\n@@ -1,2 +1,2 @@\n a\n-b\n"
            "\\ No newline at end of file\n+b\n")
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert (tree / "c.py").read_text() == "a\nb\n"


def test_pure_rename(tree):
    diff = "diff --git a/b.py b/c.py\nsimilarity index 100%\nrename from b.py\nrename to c.py\n"
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert report.files[0].change == "renamed"
    assert (tree / "c.py").read_text() == B and not (tree / "b.py").exists()


def test_rename_with_edit(tree):
    body = udiff("b.py", B, replace(B, "b 3\n", "B3\n")).split("\n", 1)[1]
    body = body.replace("--- a/b.py", "--- a/c.py", 1).replace("+++ b/b.py", "+++ b/c.py", 1)
    body = body.replace("--- a/c.py", "--- a/b.py")
    diff = ("diff --git a/b.py b/c.py\nsimilarity index 90%\nrename from b.py\nrename to c.py\n"
            "index 1111111..2222222 100644\n" + body)
    report = apply_diff(diff, tree)
    assert report.status == "applied", report.message
    assert report.files[0].change == "renamed" and report.files[0].path == "c.py"
    assert statuses(report) == ["applied"]
    assert (tree / "c.py").read_text() == replace(B, "b 3\n", "B3\n") and not (tree / "b.py").exists()


def test_rename_with_edit_next_to_a_failing_hunk(tree):
    body = udiff("b.py", B, replace(B, "b 3\n", "B3\n")).split("\n", 1)[1].replace("+++ b/b.py", "+++ b/c.py")
    rename = "diff --git a/b.py b/c.py\nsimilarity index 90%\nrename from b.py\nrename to c.py\n" + body
    bad = udiff("a.py", replace(A, "line 5\n", "absent\n"), replace(A, "line 5\n", "FIVE\n"), n=0)
    report = apply_diff(rename + bad, tree)
    assert report.status == "partial" and report.method == "patch --fuzz=3"
    assert {f.path: [h.status for h in f.hunks] for f in report.files} == {"c.py": ["applied"], "a.py": ["failed"]}
    assert "B3\n" in (tree / "c.py").read_text()


def test_missing_file_next_to_a_good_one(tree):
    diff = udiff("nope.py", A, replace(A, "line 10\n", "X\n")) + udiff("b.py", B, replace(B, "b 2\n", "B2\n"))
    report = apply_diff(diff, tree)
    assert report.status == "partial" and report.method == "patch --fuzz=3"
    assert {f.path: [h.status for h in f.hunks] for f in report.files} == {"nope.py": ["failed"], "b.py": ["applied"]}
    assert "B2\n" in (tree / "b.py").read_text() and not (tree / "nope.py").exists()


def test_copy(tree):
    diff = "diff --git a/b.py b/c.py\nsimilarity index 100%\ncopy from b.py\ncopy to c.py\n"
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert (tree / "c.py").read_text() == B == (tree / "b.py").read_text()


def test_deletion(tree):
    body = "".join(f"-{line}\n" for line in B.splitlines())
    diff = f"diff --git a/b.py b/b.py\ndeleted file mode 100644\n--- a/b.py\n+++ /dev/null\n@@ -1,20 +0,0 @@\n{body}"
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert report.files[0].change == "deleted" and report.files[0].path == "b.py"
    assert not (tree / "b.py").exists()


def test_deletion_of_missing_file_is_failed(tree):
    diff = "diff --git a/zz.py b/zz.py\ndeleted file mode 100644\n--- a/zz.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    report = apply_diff(diff, tree)
    assert report.status == "failed" and report.message


def test_mode_only_change(tree):
    diff = "diff --git a/b.py b/b.py\nold mode 100644\nnew mode 100755\n"
    report = apply_diff(diff, tree)
    assert report.status == "applied"
    assert os.access(tree / "b.py", os.X_OK)


def test_garbage_after_header_never_raises(tree):
    for diff in ("diff --git a/a.py b/a.py\n@@ broken @@\n+x\n", "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n",
                 "diff --git a/a.py\n", "@@ -1 +1 @@\n-x\n+y\n", "--- \n+++ \n@@ -1 +1 @@\n-x\n+y\n"):
        report = apply_diff(diff, tree)
        assert report.status in ("failed", "rejected", "partial", "applied", "empty")
    assert (tree / "a.py").read_text() == A


# --- private trees ----------------------------------------------------------------------------------------------


def test_make_tree_is_a_private_copy(tmp_path):
    base_dir = tmp_path / "base"
    (base_dir / "vllm").mkdir(parents=True)
    (base_dir / "vllm" / "core.py").write_text("X = 1\n")
    subprocess.run(["git", "init", "-q", str(base_dir)], check=True)
    base = BuiltBase("fake-task", base_dir, "0" * 40, "key")
    parent = tmp_path / "scratch"
    parent.mkdir()
    tree = make_tree(base, parent)
    assert tree.parent == parent and (tree / ".git").is_dir()
    assert (tree / "vllm" / "core.py").read_text() == "X = 1\n"
    report = apply_diff(udiff("vllm/core.py", "X = 1\n", "X = 2\n"), tree)
    assert report.status == "applied"
    (tree / "vllm" / "extra.py").write_text("")
    assert (base_dir / "vllm" / "core.py").read_text() == "X = 1\n"
    assert not (base_dir / "vllm" / "extra.py").exists()
    # The copy's repository is its own, not a link to the base's git data.
    assert (tree / ".git").resolve() != (base_dir / ".git").resolve()
    assert subprocess.run(["git", "-C", str(tree), "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True).stdout.strip() == str(tree)


def test_scratch_root(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADER_SCRATCH", str(tmp_path))
    assert scratch_root() == tmp_path
    monkeypatch.delenv("GRADER_SCRATCH")
    root = scratch_root()
    assert root.is_dir() and os.access(root, os.W_OK)


def test_tool_timeout_is_a_failure_not_an_exception(tree, monkeypatch):
    import grader.pipeline.apply as apply_module

    def hang(argv, tree, stdin_text, hidden, timeout=120, contained=True, touched=None):
        return None, f"error: {argv[0]} timed out after {timeout} s"

    monkeypatch.setattr(apply_module, "run_tool", hang)
    report = apply_diff(udiff("a.py", A, replace(A, "line 10\n", "X\n")), tree)
    assert report.status == "failed" and "timed out" in report.message


# --- headers read as git reads them (C-quoted names, octal modes, copy sources) ------------------------------


@pytest.mark.parametrize("header", [
    'diff --git "a/conftest\\056py" "b/conftest\\056py"\nnew file mode 100644\n--- /dev/null\n+++ "b/conftest\\056py"\n',
    'diff --git "a/pkg/sitecustomize\\056py" "b/pkg/sitecustomize\\056py"\nnew file mode 100644\n--- /dev/null\n'
    '+++ "b/pkg/sitecustomize\\056py"\n',
])
def test_quoted_self_executing_name_is_dropped(tree, header):
    diff = header + "@@ -0,0 +1 @@\n+import os\n"
    report = apply_diff(diff, tree)
    assert report.status == "applied" and report.neutralized, report  # dropped; the rest (nothing) applied
    assert not (tree / "conftest.py").exists() and not (tree / "pkg" / "sitecustomize.py").exists()


def test_quoted_copy_source_outside_the_tree_is_rejected(tree):
    diff = ('diff --git "a/\\057root/secret" b/stolen.txt\nsimilarity index 100%\ncopy from "\\057root/secret"\n'
            'copy to stolen.txt\n')
    report = apply_diff(diff, tree)
    assert report.status == "rejected" and "outside the tree" in report.message
    assert not (tree / "stolen.txt").exists()


def test_quoted_dotdot_is_rejected(tree):
    diff = ('diff --git "a/\\056\\056/x.py" "b/\\056\\056/x.py"\nnew file mode 100644\n--- /dev/null\n'
            '+++ "b/\\056\\056/x.py"\n@@ -0,0 +1 @@\n+x\n')
    report = apply_diff(diff, tree)
    assert report.status == "rejected" and "outside the tree" in report.message


@pytest.mark.parametrize("mode", ["0120000", "120000", "160000", "040000", "100777", "100666"])
def test_only_regular_file_modes_are_accepted(tree, mode):
    diff = (f"diff --git a/link b/link\nnew file mode {mode}\nindex 0000000..1111111\n--- /dev/null\n+++ b/link\n"
            "@@ -0,0 +1 @@\n+/proc/self/pagemap\n\\ No newline at end of file\n")
    report = apply_diff(diff, tree)
    assert report.status == "rejected", report
    assert not os.path.lexists(tree / "link")


def test_index_line_mode_is_checked(tree):
    diff = ("diff --git a/a.py b/a.py\nindex 1111111..2222222 120000\n--- a/a.py\n+++ b/a.py\n"
            "@@ -1 +1 @@\n-line 1\n+/etc/shadow\n")
    assert apply_diff(diff, tree).status == "rejected"


def test_unterminated_quote_is_rejected(tree):
    diff = 'diff --git "a/x.py b/x.py\nnew file mode 100644\n--- /dev/null\n+++ "b/x.py\n@@ -0,0 +1 @@\n+x\n'
    assert apply_diff(diff, tree).status == "rejected"


def test_applied_tree_identity_follows_content_not_parsed_paths(make_git_tree):
    """Two diffs that leave the same bytes get the same identity; any byte more gives another."""
    first, second, third = (make_git_tree({"a.py": A}, name=n) for n in ("one", "two", "three"))
    edit = udiff("a.py", A, replace(A, "line 3\n", "THREE\n"))
    same_by_other_route = udiff("a.py", A, replace(A, "line 3\n", "THREE\n"), n=1)
    other = udiff("a.py", A, replace(A, "line 3\n", "THREE!\n"))
    ids = [apply_diff(d, t).tree_id for d, t in ((edit, first), (same_by_other_route, second), (other, third))]
    assert ids[0] and ids[0] == ids[1] != ids[2]


def test_git_and_patch_run_unprivileged_and_see_only_the_tree(tree, monkeypatch):
    """The apply tools run in a sandbox: as root, under another uid, with the repository hidden."""
    import grader.pipeline.apply as apply_module
    from grader.sandbox import contain

    if not contain.probe().drop_uid:
        pytest.skip("no unprivileged uid on this machine")
    system_python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system_python is None:
        pytest.skip("no python3 on the tools' PATH (/usr/local/bin:/usr/bin:/bin) to probe the sandbox with")
    seen = {}

    def spy(argv, tree_, stdin_text, hidden, timeout=120, contained=True, touched=None):
        from grader.sandbox.tooling import run_tool

        code = ("import os, sys; print(os.getuid(), os.path.exists(sys.argv[1] + '/reference_impl'), "
                "os.access('b.py', os.W_OK))")
        seen["probe"] = run_tool([system_python, "-c", code, str(apply_module.REPO_ROOT)], tree_, "", hidden,
                                 touched=touched)
        return run_tool(argv, tree_, stdin_text, hidden, timeout, contained, touched)

    monkeypatch.setattr(apply_module, "run_tool", spy)
    report = apply_diff(udiff("a.py", A, replace(A, "line 10\n", "TEN\n")), tree)
    assert report.status == "applied"
    uid, repo_visible, other_file_writable = seen["probe"][1].split()
    assert int(uid) != 0 and repo_visible == "False", seen
    assert other_file_writable == "False", "a file the diff does not name was writable to the tool"
    assert os.stat(tree / "a.py").st_uid == os.geteuid()
