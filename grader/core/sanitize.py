"""Text a candidate chose, made safe to keep, write and show: one helper for every boundary where such text enters
the grader's records (the judge's evidence, the applied diff's report, ingestion).

A candidate controls exception messages, names, captured output and the bytes of its diff's file names. Any of
them can hold what breaks an output: a lone surrogate (no UTF-8 encoding exists, so writing the page fails), a
byte that is not UTF-8 (decoded with ``surrogateescape``), a character XML 1.0 forbids (junit.xml ill-formed), or
a control character that a terminal obeys (ESC clears the screen, CR overwrites a line). Each of those becomes a
visible escape: the text still says what the candidate wrote, and no output can be broken by it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from grader.core.records import ApplyReport, FileReport, HunkReport

# Longest text kept from one candidate-chosen field; the rest is cut with a note saying how much.
TEXT_LIMIT = 20_000
# Room left under the limit for the note that says how much was cut (its number has at most a dozen digits).
CUT_NOTE_ROOM = 48
# C0 controls but newline and tab, DEL, C1 controls, every surrogate, and the two BMP non-characters XML forbids.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str, limit: int | None = TEXT_LIMIT) -> str:
    """``text`` with every unsafe character written as a visible escape (``\\x1b``, ``\\xff`` for a byte that was
    not UTF-8, ``\\ud800``), cut to at most ``limit`` characters. Idempotent: clean text comes back unchanged."""
    text = UNSAFE.sub(_escape, text)
    if limit is not None and len(text) > limit:
        keep = max(0, limit - CUT_NOTE_ROOM)
        text = text[:keep] + f" [... {len(text) - keep} more characters cut]"
    return text


def clean_bytes(data: bytes, limit: int | None = TEXT_LIMIT) -> str:
    """Bytes a candidate wrote, as clean text: UTF-8 where they are, each other byte as ``\\xNN``."""
    return clean(data.decode("utf-8", "surrogateescape"), limit)


def is_clean(text: str) -> bool:
    """Whether ``text`` holds nothing ``clean`` would escape."""
    return UNSAFE.search(text) is None


def clean_apply_report(report: ApplyReport) -> ApplyReport:
    """The report with every name and message the diff chose cleaned (file names, hunk headers, tool output);
    the tree identity stays as git computed it."""
    files = [FileReport(clean(f.path), f.change, [HunkReport(clean(h.header), h.status, clean(h.detail))
                                                   for h in f.hunks]) for f in report.files]
    return replace(report, files=files, message=clean(report.message), description=clean(report.description),
                   neutralized=[clean(p) for p in report.neutralized], binary=[clean(p) for p in report.binary])
