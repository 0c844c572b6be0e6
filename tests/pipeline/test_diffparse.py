"""Line-level diff reading: sections, blobs, complete and cut hunks, and rendering back."""

from __future__ import annotations

import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from grader.pipeline.diffparse import parse_sections, render

TWO_FILES = """\
diff --git a/pkg/a.py b/pkg/a.py
index 1234567..89abcde 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1,4 +1,5 @@ def f():
 one
-two
+TWO
+two and a half
 three
 four
@@ -10,3 +11,3 @@ class C:
 ten
-eleven
+ELEVEN
 twelve
diff --git a/b.py b/b.py
new file mode 100644
index 0000000..1111111
--- /dev/null
+++ b/b.py
@@ -0,0 +1,2 @@
+x = 1
+y = 2
"""


def test_sections_paths_blobs_hunks():
    a, b = parse_sections(TWO_FILES)
    assert (a.old_path, a.new_path, a.path, a.pre_blob) == ("pkg/a.py", "pkg/a.py", "pkg/a.py", "1234567")
    assert [(h.old_count, h.new_count, h.complete) for h in a.hunks] == [(4, 5, True), (3, 3, True)]
    assert a.hunks[0].header.startswith("@@ -1,4 +1,5 @@")
    assert (b.old_path, b.new_path, b.path, b.pre_blob) == ("/dev/null", "b.py", "b.py", "0000000")
    assert b.hunks[0].lines == ["+x = 1", "+y = 2"]


def test_render_round_trips_complete_diff():
    assert render(parse_sections(TWO_FILES)) == TWO_FILES
    assert render(parse_sections(render(parse_sections(TWO_FILES)))) == TWO_FILES


def test_plain_unified_diff_without_git_header():
    text = "--- a/x.py\t2020-01-01\n+++ b/x.py\t2020-01-02\n@@ -1 +1 @@\n-a\n+b\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-c\n+d\n"
    sections = parse_sections(text)
    assert [s.path for s in sections] == ["x.py", "y.py"]
    assert render(sections) == text


def test_hunk_line_counts_default_to_one():
    [s] = parse_sections("--- a/x\n+++ b/x\n@@ -3 +3 @@\n-a\n+b\n")
    assert (s.hunks[0].old_count, s.hunks[0].new_count, s.hunks[0].complete) == (1, 1, True)


def test_incomplete_final_hunk_is_dropped():
    cut = "\n".join(TWO_FILES.splitlines()[:-1]) + "\n"  # b.py's hunk loses its last line
    sections = parse_sections(cut)
    assert [h.complete for s in sections for h in s.hunks] == [True, True, False]
    rendered = render(sections)
    assert "b.py" not in rendered  # the file is left with no change, so its header goes too
    assert rendered == TWO_FILES.split("diff --git a/b.py")[0]


def test_cut_inside_second_hunk_keeps_the_first():
    cut = "\n".join(TWO_FILES.splitlines()[:13]) + "\n"  # stops after " ten"
    [a] = parse_sections(cut)
    assert [h.complete for h in a.hunks] == [True, False]
    assert render([a]).count("@@") == 2 and "ten" not in render([a])


def test_blank_context_line_stripped_to_empty():
    stripped = "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n"  # " " arrived as ""
    [s] = parse_sections(stripped)
    assert s.hunks[0].complete
    assert s.hunks[0].lines == [" a", " ", "-b", "+B"]
    assert render([s]) == "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n \n-b\n+B\n"


def test_no_newline_markers_stay_with_their_hunk():
    text = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+B\n\\ No newline at end of file\n"
    [s] = parse_sections(text)
    assert s.hunks[0].complete and render([s]) == text


def test_header_only_changes_survive_render():
    text = ("diff --git a/m.sh b/m.sh\nold mode 100644\nnew mode 100755\n"
            "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
            "diff --git a/e.py b/e.py\nnew file mode 100644\nindex 0000000..e69de29\n")
    sections = parse_sections(text)
    assert [s.path for s in sections] == ["m.sh", "new.py", "e.py"]
    assert render(sections) == text


def test_section_with_nothing_left_is_dropped():
    text = "diff --git a/x b/x\nindex 1111111..2222222 100644\n--- a/x\n"
    assert render(parse_sections(text)) == ""


def test_malformed_input_never_raises():
    for text in ("", "\n\n", "hello\n", "@@ -1 +1 @@\n-a\n+b\n", "diff --git a/x\n@@ nope @@\n",
                 "--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n", "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\nprose\n"):
        render(parse_sections(text))


def test_crlf_carried_diff_is_read_as_lf():
    sections = parse_sections(TWO_FILES.replace("\n", "\r\n"))
    assert render(sections) == TWO_FILES


def test_carriage_returns_inside_content_lines_are_kept():
    text = "diff --git a/w.py b/w.py\n--- a/w.py\n+++ b/w.py\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+B\r\n"
    [s] = parse_sections(text)
    assert s.hunks[0].lines == [" a\r", "-b\r", "+B\r"] and render([s]) == text




lines_strategy = st.lists(st.text(alphabet="ab \tx#\x0c\u2028", max_size=6).map(lambda s: s + "\n"),
                          max_size=12)


@settings(max_examples=60, deadline=None)
@given(lines_strategy, lines_strategy, st.integers(0, 3))
def test_round_trip_of_generated_diffs(old, new, context):
    body = "".join(difflib.unified_diff(old, new, "a/f.py", "b/f.py", n=context))
    if not body:
        return
    text = "diff --git a/f.py b/f.py\n" + body
    sections = parse_sections(text)
    assert all(h.complete for s in sections for h in s.hunks)
    assert render(sections) == text
    # Cutting it anywhere inside a hunk leaves only whole hunks, each of which is a prefix of the original.
    lines = text.split("\n")[:-1]
    cut = "\n".join(lines[: max(4, len(lines) - 1)]) + "\n"
    rendered = render(parse_sections(cut))
    assert text.startswith(rendered.removesuffix("\n")) or rendered == ""
