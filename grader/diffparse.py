"""Line-level reading of unified diffs: file sections, pre-image blobs and hunks whose line counts are cut short.

unidiff rejects a diff whose last hunk is shorter than its header says; the seed's 60-line previews end that
way, so this module finds such hunks itself and can drop them, leaving a diff every tool accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
DIFF_GIT = re.compile(r"^diff --git (\S+) (\S+)$")
INDEX_LINE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)")


@dataclass
class Hunk:
    header: str
    lines: list[str]
    old_count: int
    new_count: int
    complete: bool


@dataclass
class FileSection:
    header: list[str]
    hunks: list[Hunk] = field(default_factory=list)
    old_path: str | None = None
    new_path: str | None = None
    pre_blob: str | None = None

    @property
    def path(self) -> str:
        return self.new_path if self.new_path not in (None, "/dev/null") else (self.old_path or "")


def _strip_prefix(path: str) -> str:
    path = path.split("\t", 1)[0]
    if path == "/dev/null":
        return path
    return path[2:] if path[:2] in ("a/", "b/") else path


def _read_hunk(lines: list[str], start: int) -> tuple[Hunk, int]:
    match = HUNK_HEADER.match(lines[start])
    old_total = int(match.group(2) or 1)
    new_total = int(match.group(4) or 1)
    old_seen = new_seen = 0
    i = start + 1
    body = []
    while i < len(lines) and (old_seen < old_total or new_seen < new_total):
        line = lines[i]
        # Previews strip trailing whitespace, so an empty context line arrives as "".
        tag = line[:1] if line else " "
        if tag == " ":
            old_seen += 1
            new_seen += 1
        elif tag == "-":
            old_seen += 1
        elif tag == "+":
            new_seen += 1
        elif tag != "\\":
            break
        body.append(line if line else " ")
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        body.append(lines[i])
        i += 1
    complete = old_seen == old_total and new_seen == new_total
    return Hunk(lines[start], body, old_total, new_total, complete), i


def split_lines(text: str) -> list[str]:
    """Lines split at "\\n" only: a carriage return, form feed or U+2028 inside a line is the file's content.

    A diff whose every line ends in "\\r" was carried with CRLF line ends, and those are removed.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines and all(line.endswith("\r") for line in lines if line):
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


def parse_sections(text: str) -> list[FileSection]:
    """Split a diff into file sections with their hunks; never raises on malformed input."""
    lines = split_lines(text)
    sections: list[FileSection] = []
    current: FileSection | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        git_header = DIFF_GIT.match(line)
        if git_header or (line.startswith("--- ") and (current is None or current.hunks)):
            current = FileSection(header=[line])
            if git_header:
                current.old_path = _strip_prefix(git_header.group(1))
                current.new_path = _strip_prefix(git_header.group(2))
            sections.append(current)
            i += 1
            continue
        if current is None:
            i += 1
            continue
        if line.startswith("@@"):
            if not HUNK_HEADER.match(line):
                current.header.append(line)
                i += 1
                continue
            hunk, i = _read_hunk(lines, i)
            current.hunks.append(hunk)
            continue
        if not current.hunks:
            current.header.append(line)
            if line.startswith("--- "):
                current.old_path = _strip_prefix(line[4:])
            elif line.startswith("+++ "):
                current.new_path = _strip_prefix(line[4:])
            elif m := INDEX_LINE.match(line):
                current.pre_blob = m.group(1)
        i += 1
    return sections


def render(sections: list[FileSection]) -> str:
    """Write sections back as diff text, dropping incomplete hunks and sections left with no change."""
    out: list[str] = []
    for section in sections:
        hunks = [h for h in section.hunks if h.complete]
        if not hunks and not _is_header_only_change(section):
            continue
        out.extend(section.header)
        for hunk in hunks:
            out.append(hunk.header)
            out.extend(hunk.lines)
    return "\n".join(out) + "\n" if out else ""


def _is_header_only_change(section: FileSection) -> bool:
    """Mode changes, pure renames and empty new/deleted files carry no hunks but are still changes."""
    if section.hunks:
        return False
    keys = ("old mode", "new mode", "rename from", "rename to", "copy from", "copy to", "new file mode",
            "deleted file mode")
    return any(line.startswith(keys) for line in section.header)
