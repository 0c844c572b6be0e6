"""Line-level reading of unified diffs: file sections, pre-image blobs and hunks whose line counts are cut short.

unidiff rejects a diff whose last hunk is shorter than its header says; the seed's 60-line previews end that
way, so this module finds such hunks itself and can drop them, leaving a diff every tool accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
INDEX_LINE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: ([0-7]+))?$")
MODE_KEYS = ("old mode ", "new mode ", "new file mode ", "deleted file mode ")
PATH_KEYS = ("rename from ", "rename to ", "copy from ", "copy to ")
# git's C quoting of path names (quote.c): these escapes, and \NNN octal bytes.
C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class BadPath(ValueError):
    """A header names a path that git itself would not parse (an unterminated quote, a bad escape)."""


def unquote_c(text: str) -> tuple[str, str]:
    """Read one git path token from the start of ``text``: a C-quoted string (decoded, as git does) or a run of
    non-space characters. Returns (name, rest)."""
    if not text.startswith('"'):
        token, _, rest = text.partition(" ")
        return token, rest
    out = bytearray()
    i = 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            return out.decode("utf-8", "surrogateescape"), text[i + 1:].lstrip(" ")
        if ch == "\\":
            nxt = text[i + 1:i + 2]
            if nxt in C_ESCAPES:
                out.append(C_ESCAPES[nxt])
                i += 2
                continue
            octal = text[i + 1:i + 4]
            if len(octal) == 3 and all(c in "01234567" for c in octal):
                out.append(int(octal, 8) & 0xFF)
                i += 4
                continue
            raise BadPath(f"bad escape in quoted path {text[:80]!r}")
        out += ch.encode("utf-8", "surrogateescape")
        i += 1
    raise BadPath(f"unterminated quoted path {text[:80]!r}")


def header_path(text: str) -> str:
    """The path of a ``---``/``+++``/rename/copy line's value: decoded, a GNU timestamp after a tab dropped."""
    if text.startswith('"'):
        name, _ = unquote_c(text)
        return name
    return text.split("\t", 1)[0]


def git_pair(rest: str) -> tuple[str, str]:
    """The two names of a ``diff --git`` line. Quoted names are decoded; two unquoted names with spaces are
    split where they agree (``a/X b/X``), as git does."""
    if rest.startswith('"') or '"' in rest:
        first, after = unquote_c(rest)
        second, _ = unquote_c(after) if after.startswith('"') else (after, "")
        return first, second
    if " " not in rest:
        return rest, ""
    half = len(rest) // 2
    left, right = rest[:half], rest[half + 1:]
    if rest[half] == " " and strip_prefix(left) == strip_prefix(right):
        return left, right
    first, _, second = rest.partition(" ")
    return first, second


@dataclass
class Hunk:
    header: str
    lines: list[str]
    old_count: int
    new_count: int
    complete: bool


@dataclass
class FileSection:
    """One file of a diff, its header read as git reads it: every name decoded, every mode kept as written."""

    header: list[str]
    hunks: list[Hunk] = field(default_factory=list)
    old_path: str | None = None
    new_path: str | None = None
    pre_blob: str | None = None
    # Every path any line of the header names (diff --git pair, ---/+++, rename/copy from/to), decoded.
    named: list[str] = field(default_factory=list)
    # Every mode the header states (old/new/new file/deleted file mode, the index line's), as octal strings.
    modes: list[str] = field(default_factory=list)
    copies_from: list[str] = field(default_factory=list)
    header_error: str | None = None
    # The old and new names as the header writes them, before any prefix is stripped (decoded).
    raw_old: str | None = None
    raw_new: str | None = None

    @property
    def path(self) -> str:
        return self.new_path if self.new_path not in (None, "/dev/null") else (self.old_path or "")


def strip_prefix(path: str) -> str:
    """A diff path without git's ``a/``/``b/`` prefix (``/dev/null`` stays)."""
    if path == "/dev/null":
        return path
    return path[2:] if path[:2] in ("a/", "b/") else path


def _read_header_line(section: FileSection, line: str) -> None:
    """Record what one header line names or states; a name git could not parse is kept as the section's error."""
    try:
        if line.startswith("diff --git "):
            old, new = git_pair(line[len("diff --git "):])
            section.raw_old, section.raw_new = old, new or None
            section.old_path, section.new_path = strip_prefix(old), strip_prefix(new) if new else None
            section.named += [section.old_path] + ([section.new_path] if new else [])
        elif line.startswith("--- "):
            section.raw_old = header_path(line[4:])
            section.old_path = strip_prefix(section.raw_old)
            section.named.append(section.old_path)
        elif line.startswith("+++ "):
            section.raw_new = header_path(line[4:])
            section.new_path = strip_prefix(section.raw_new)
            section.named.append(section.new_path)
        elif line.startswith(PATH_KEYS):
            key = next(k for k in PATH_KEYS if line.startswith(k))
            name = header_path(line[len(key):])
            section.named.append(name)
            if key == "copy from ":
                section.copies_from.append(name)
        elif line.startswith(MODE_KEYS):
            key = next(k for k in MODE_KEYS if line.startswith(k))
            section.modes.append(line[len(key):].strip())
        elif m := INDEX_LINE.match(line):
            section.pre_blob = m.group(1)
            if m.group(3):
                section.modes.append(m.group(3))
    except BadPath as exc:
        section.header_error = str(exc)


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
        git_header = line.startswith("diff --git ")
        if git_header or (line.startswith("--- ") and (current is None or current.hunks)):
            current = FileSection(header=[line])
            _read_header_line(current, line)
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
            _read_header_line(current, line)
        i += 1
    return sections


@dataclass(frozen=True)
class ParsedDiff:
    """A diff read once: its text and its file sections, as the safety check and the apply both consume them."""

    text: str
    sections: tuple[FileSection, ...]


def parse_diff(text: str) -> ParsedDiff:
    return ParsedDiff(text, tuple(parse_sections(text)))


def render(sections: list[FileSection]) -> str:
    """Write sections back as diff text, dropping incomplete hunks and sections left with no change."""
    out: list[str] = []
    for section in sections:
        hunks = [h for h in section.hunks if h.complete]
        if not hunks and not is_header_only_change(section):
            continue
        out.extend(section.header)
        for hunk in hunks:
            out.append(hunk.header)
            out.extend(hunk.lines)
    return "\n".join(out) + "\n" if out else ""


def is_header_only_change(section: FileSection) -> bool:
    """Mode changes, pure renames and empty new/deleted files carry no hunks but are still changes."""
    if section.hunks:
        return False
    keys = ("old mode", "new mode", "rename from", "rename to", "copy from", "copy to", "new file mode",
            "deleted file mode")
    return any(line.startswith(keys) for line in section.header)


# How well a strip depth explains one name: a file that is there, a file whose folder is there, a new file one of
# whose enclosing folders is there.
FOUND_FILE, FOUND_FOLDER, FOUND_ANCESTOR = 3, 2, 1


def without_components(path: str, depth: int) -> str | None:
    """``path`` with its first ``depth`` components removed (``patch -p``), None when it has no more than that."""
    parts = [p for p in path.split("/") if p]
    return "/".join(parts[depth:]) if len(parts) > depth else None


def strip_depth(sections: list[FileSection], is_file, is_dir) -> int:
    """The ``-p`` depth that makes the diff's names the paths of the tree ``is_file``/``is_dir`` describe, as
    ``patch -p`` or ``git apply -p`` would be told by a person who looked: ``diff -ru`` between release folders
    (``vllm-0.25.0/vllm/...``) is 1, a diff written with no ``a/`` prefix is 0, git's own diffs are 1. Each depth
    that leaves every name a name is scored by how well it explains them (a file that is there, else a folder of
    it); git's 1 wins a tie, and a diff that no depth explains keeps it where it can."""
    names = [(s.raw_old, s.raw_new) for s in sections if s.raw_old or s.raw_new]
    paths = [p for pair in names for p in pair if p and p != "/dev/null"]
    if not paths or all(is_git_prefixed(s) for s in sections):
        return 1
    deepest = min(len([part for part in p.split("/") if part]) for p in paths) - 1

    def explains(path: str, depth: int, existing: bool) -> int:
        rel = without_components(path, depth)
        if rel is None:
            return 0
        if existing and is_file(rel):
            return FOUND_FILE
        folders = [str(folder) for folder in PurePosixPath(rel).parents][:-1]  # without the top, "."
        if folders and is_dir(folders[0]):
            return FOUND_FOLDER
        return FOUND_ANCESTOR if any(is_dir(folder) for folder in folders[1:]) else 0

    def score(depth: int) -> int:
        return sum(explains(old, depth, True) if old and old != "/dev/null" else explains(new, depth, False)
                   for old, new in names if (old and old != "/dev/null") or (new and new != "/dev/null"))

    scores = {depth: score(depth) for depth in (1, 0, *range(2, deepest + 1)) if depth <= deepest}
    best = max(scores.values())
    return next(depth for depth, value in scores.items() if value == best) if best else min(1, deepest)


def quote_c(name: str) -> str:
    """A path as git writes it in a header: C-quoted when it holds a quote, a backslash, a control character, a
    byte that is not UTF-8 or edge spaces; else as it is."""
    raw = name.encode("utf-8", "surrogateescape")
    if not any(b < 32 or b in (34, 92, 127) for b in raw) and name == name.strip() and \
            raw.decode("utf-8", "replace") == name:
        return name
    names = {value: key for key, value in C_ESCAPES.items()}
    return '"' + "".join(f"\\{names[b]}" if b in names else chr(b) if 32 <= b < 127 else f"\\{b:03o}"
                         for b in raw) + '"'


def is_git_prefixed(section: FileSection) -> bool:
    """A section git wrote with its own prefixes: a ``diff --git`` line, every name under ``a/``/``b/``."""
    return bool(section.header) and section.header[0].startswith("diff --git ") and all(
        p in (None, "/dev/null") or p.startswith(("a/", "b/")) for p in (section.raw_old, section.raw_new))


def restripped(section: FileSection, depth: int) -> FileSection:
    """``section`` with its names stripped of ``depth`` components and written as git writes them (``a/``,
    ``b/``), so every tool reads them alike with ``-p1``; a section already in that form is returned as it is."""
    prefixed = all(p in (None, "/dev/null") or p.startswith(("a/", "b/")) for p in (section.raw_old, section.raw_new))
    if depth == 1 and prefixed or section.header_error:
        return section

    def name(path: str | None, prefix: str) -> str:
        rel = without_components(path, depth) if path and path != "/dev/null" else None
        return "/dev/null" if rel is None else quote_c(prefix + rel)

    header = []
    for line in section.header:
        if line.startswith("diff --git "):
            line = f"diff --git {name(section.raw_old, 'a/')} {name(section.raw_new or section.raw_old, 'b/')}"
        elif line.startswith("--- "):
            line = f"--- {name(section.raw_old, 'a/')}"
        elif line.startswith("+++ "):
            line = f"+++ {name(section.raw_new, 'b/')}"
        elif line.startswith(PATH_KEYS) and depth > 1:
            key = next(k for k in PATH_KEYS if line.startswith(k))
            line = key + quote_c(without_components(header_path(line[len(key):]), depth - 1) or "")
        header.append(line)
    fresh = FileSection(header=header, hunks=section.hunks)
    for line in header:
        _read_header_line(fresh, line)
    return fresh
