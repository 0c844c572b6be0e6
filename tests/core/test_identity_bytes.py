"""Identity is the bytes that run: a tree's key comes from its files' bytes as the diff writes them, whatever
``.gitattributes`` the candidate adds (ident, end-of-line conversion, filters, a working-tree encoding), and the
apply writes those bytes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from grader.pipeline.apply import apply_diff, make_tree
from grader.core.records import BuiltBase


@pytest.fixture
def base(tmp_path) -> BuiltBase:
    root = tmp_path / "base"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "core.py").write_text("X = 1\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "b"],
                   check=True)
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    return BuiltBase("fake-task", root, commit, "key")


def adding(files: dict[str, bytes]) -> str:
    """A git diff adding each file (its lines as they are, so a "\\r" stays in the line)."""
    out = []
    for path, data in files.items():
        lines = data.decode().split("\n")[:-1]
        body = "".join(f"+{line}\n" for line in lines)
        out.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
                   f"@@ -0,0 +1,{len(lines)} @@\n{body}")
    return "".join(out)


def applied_id(base: BuiltBase, tmp_path: Path, name: str, diff: str) -> tuple[str, Path]:
    parent = tmp_path / name
    parent.mkdir()
    tree = make_tree(base, parent)
    report = apply_diff(diff, tree, cut_preview=False)
    assert report.status == "applied", report
    return report.tree_id, tree


@pytest.mark.parametrize("attributes,first,second", [
    (b"*.py ident\n", b"ID = '$Id: aaaa $'\n", b"ID = '$Id: bbbb $'\n"),
    (b"*.py text eol=lf\n", b"Y = 1\r\n", b"Y = 1\n"),
    (b"*.py text=auto\n", b"Y = 2\r\n", b"Y = 2\n"),
    (b"*.py filter=undefined\n", b"Y = 3\n", b"Y = 4\n"),
])
def test_trees_that_differ_in_bytes_never_share_a_key_whatever_the_attributes(base, tmp_path, attributes, first,
                                                                               second):
    one, tree_one = applied_id(base, tmp_path, "one", adding({".gitattributes": attributes, "vllm/new.py": first}))
    two, tree_two = applied_id(base, tmp_path, "two", adding({".gitattributes": attributes, "vllm/new.py": second}))
    assert (tree_one / "vllm" / "new.py").read_bytes() == first
    assert (tree_two / "vllm" / "new.py").read_bytes() == second
    assert one != two


def test_attributes_do_not_change_what_git_apply_writes(base, tmp_path):
    # eol=crlf would make git write CRLF into the working tree on its own; the diff says LF.
    diff = adding({".gitattributes": b"* text eol=crlf\n"}) + \
        "diff --git a/vllm/core.py b/vllm/core.py\n--- a/vllm/core.py\n+++ b/vllm/core.py\n@@ -1 +1,2 @@\n X = 1\n+Z = 2\n"
    _, tree = applied_id(base, tmp_path, "crlf", diff)
    assert (tree / "vllm" / "core.py").read_bytes() == b"X = 1\nZ = 2\n"


def test_a_non_utf8_quoted_name_is_written_byte_for_byte(base, tmp_path):
    diff = ('diff --git "a/vllm/\\377x.py" "b/vllm/\\377x.py"\nnew file mode 100644\n--- /dev/null\n'
            '+++ "b/vllm/\\377x.py"\n@@ -0,0 +1 @@\n+Y = 2\n')
    _, tree = applied_id(base, tmp_path, "quoted", diff)
    assert sorted(p.name.encode("utf-8", "surrogateescape") for p in (tree / "vllm").iterdir()) == \
        [b"core.py", b"\xffx.py"]
    assert (tree / "vllm" / b"\xffx.py".decode("utf-8", "surrogateescape")).read_bytes() == b"Y = 2\n"


def test_a_non_utf8_quoted_name_is_reported_as_applied_as_it_was(base, tmp_path):
    """git's progress lines name such a file C-quoted; the report reads them decoded, so the file that was
    written is not reported "not applied" beside a verdict that graded it."""
    diff = ('diff --git "a/vllm/\\377x.py" "b/vllm/\\377x.py"\nnew file mode 100644\n--- /dev/null\n'
            '+++ "b/vllm/\\377x.py"\n@@ -0,0 +1 @@\n+Y = 2\n'
            "diff --git a/vllm/core.py b/vllm/core.py\n--- a/vllm/core.py\n+++ b/vllm/core.py\n@@ -1 +1 @@\n-X = 1\n"
            "+X = 3\n")
    parent = tmp_path / "report"
    parent.mkdir()
    report = apply_diff(diff, make_tree(base, parent), cut_preview=False)
    assert report.status == "applied"
    assert {f.path: [h.status for h in f.hunks] for f in report.files} == {
        b"vllm/\xffx.py".decode("utf-8", "surrogateescape"): ["applied"], "vllm/core.py": ["applied"]}


def test_a_machine_wide_filter_takes_no_part_in_a_trees_key(base, tmp_path, monkeypatch):
    """A user's git configuration with a clean filter for every file (what git-lfs installs) and its own
    attributes file: the tree's key is still that of the bytes."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[filter \"squash\"]\n\tclean = sed s/.*/same/\n[core]\n"
                                     f"\tattributesFile = {home / 'attributes'}\n")
    (home / "attributes").write_text("* filter=squash\n")
    monkeypatch.setenv("HOME", str(home))
    one, _ = applied_id(base, tmp_path, "one", adding({"vllm/new.py": b"Y = 1\n"}))
    two, _ = applied_id(base, tmp_path, "two", adding({"vllm/new.py": b"Y = 2\n"}))
    assert one != two


def test_a_tool_that_writes_an_added_file_otherwise_than_the_diff_is_a_named_fault(base, tmp_path, monkeypatch):
    """An apply tool that says it succeeded but wrote another name or other bytes (a decoding slip, a filter):
    the tree is not the diff's, and no verdict is told from it."""
    from grader.pipeline import apply as apply_module
    from grader.pipeline.apply import UnsoundGround

    real = apply_module.run_tool

    def misdecoding_tool(argv, tree, stdin_text, *args, **kwargs):
        code, output = real(argv, tree, stdin_text, *args, **kwargs)
        written = tree / "vllm" / b"\xffx.py".decode("utf-8", "surrogateescape")
        if written.is_file():
            written.rename(tree / "vllm" / "\ufffdx.py")
            (tree / "vllm" / b"\xffx.py".decode("utf-8", "surrogateescape")).write_bytes(b"Y = 3\n")
        return code, output

    monkeypatch.setattr(apply_module, "run_tool", misdecoding_tool)
    diff = ('diff --git "a/vllm/\\377x.py" "b/vllm/\\377x.py"\nnew file mode 100644\n--- /dev/null\n'
            '+++ "b/vllm/\\377x.py"\n@@ -0,0 +1 @@\n+Y = 2\n')
    parent = tmp_path / "mis"
    parent.mkdir()
    with pytest.raises(UnsoundGround, match="holds other bytes"):
        apply_diff(diff, make_tree(base, parent), cut_preview=False)


@pytest.mark.parametrize("body,data", [("+a\n+b\n", b"a\nb\n"), ("+a\n+b\n\\ No newline at end of file\n", b"a\nb"),
                                       ("+caf\u00e9\n", "caf\u00e9\n".encode())])
def test_added_files_are_checked_against_the_bytes_the_diff_writes(base, tmp_path, body, data):
    lines = body.count("\n+") + body.startswith("+")
    diff = (f"diff --git a/vllm/n.py b/vllm/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/vllm/n.py\n"
            f"@@ -0,0 +1,{lines} @@\n{body}")
    _, tree = applied_id(base, tmp_path, "n", diff)
    assert (tree / "vllm" / "n.py").read_bytes() == data
