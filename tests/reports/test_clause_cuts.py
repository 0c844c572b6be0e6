"""Summaries cut a failure's observation only between clauses, never inside brackets, quotes or code spans."""

from __future__ import annotations

from grader.reports.summarize import clause_boundaries, observed_clause


def balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0 and text.count("`") % 2 == 0 and text.count('"') % 2 == 0


def test_no_cut_inside_brackets():
    message = ("AssertionError: the swap-AB path was taken on SM(10, 0), capability (10, 0) for M=16, "
               "which the fix must leave on the old path, the launch table says so, see case sm100-bf16")
    assert observed_clause(message, cap=60) == "the swap-AB path was taken on SM(10, 0)"


def test_no_cut_inside_backticks_or_quotes():
    message = ("AssertionError: `fused_experts(x, w1, w2, topk)` returned the wrong shape, \"expected (4, 8), got "
               "(8, 4)\", for every case that the rubric names here, and more words to pass the cap")
    clause = observed_clause(message, cap=70)
    assert balanced(clause)
    for cut in clause_boundaries(message):
        assert balanced(message[:cut])


def test_apostrophes_do_not_open_quotes():
    text = "the kernel doesn't clamp, so values overflow, and the cache holds garbage"
    assert clause_boundaries(text) == [text.index(", so"), text.index(", and")]


def test_short_message_is_kept_whole():
    assert observed_clause("AssertionError: 3 != 4") == "AssertionError: 3 != 4"
