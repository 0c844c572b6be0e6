"""Ingestion: turn directories, single diffs and bundles into ``Candidate`` records with their task.

A bundle is the seed's record format: a repository URL line, then per candidate a verdict paragraph, a blank
line and the diff, or a single ``no diff captured (...)`` line.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tomllib
from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path, PurePosixPath

from grader.pipeline.diffparse import FileSection, parse_sections, restripped, strip_depth
from grader.core.records import Candidate
from grader.core.rubric import RUBRICS_DIR, all_base_recipes
from grader.core.sanitize import clean

DIFF_SUFFIXES = (".diff", ".patch")
# Bundles show each diff as a preview of at most this many lines; one that reaches it may be cut anywhere,
# also exactly at a hunk's end, where nothing in the text shows what is missing.
PREVIEW_LINES = 60
# Longest candidate id kept (ids come from file names and bundle names, which a candidate's author may choose).
ID_LIMIT = 200
NO_DIFF = re.compile(r"^no diff captured \((.*)\)\s*$")
DIFF_LINE_STARTS = ("diff --git", "index ", "--- ", "+++ ", "@@", "new file mode", "deleted file mode",
                    "old mode", "new mode", "similarity index", "rename from", "rename to", "Binary files",
                    "GIT binary patch", " ", "+", "-", "\\")


class IngestError(Exception):
    """An input path cannot be read as candidates at all."""


@cache
def _path_hints() -> dict[str, frozenset[str]]:
    """Per task, the files its candidates are known to touch: base blobs plus the rubric's inference paths."""
    hints = {task: set(recipe.blobs) for task, recipe in all_base_recipes().items()}
    for task in hints:
        rubric = RUBRICS_DIR / task / "rubric.toml"
        if rubric.is_file():
            hints[task].update(tomllib.loads(rubric.read_text()).get("inference", {}).get("paths", []))
    return {task: frozenset(paths) for task, paths in hints.items()}


def task_files(task: str) -> frozenset[str]:
    """The files a task's candidates are known to touch: its ``[base.blobs]`` and its rubric's inference paths."""
    return _path_hints().get(task, frozenset())


MODULE_REF = re.compile(r"\b(vllm(?:\.\w+)+)")
FROM_IMPORT = re.compile(r"^\+\s*from (vllm(?:\.\w+)*) import \(?\s*([\w, ]+)", re.M)


def referenced_module_files(diff: str) -> set[str]:
    """Files of vLLM modules that the diff's added lines import or name (``vllm.a.b`` -> ``vllm/a/b.py``)."""
    added = "\n".join(line for line in diff.splitlines() if line.startswith("+"))
    files = set()
    for dotted in MODULE_REF.findall(added):
        parts = dotted.split(".")
        files.update("/".join(parts[:n]) + ".py" for n in range(2, len(parts) + 1))
    for package, names in FROM_IMPORT.findall(diff):
        files.update(f"{package.replace('.', '/')}/{name.strip()}.py" for name in names.split(",") if name.strip())
    return files


def stripped_to_known_paths(sections: list[FileSection]) -> list[FileSection]:
    """The sections with their names stripped as the tasks' known files explain them best (``strip_depth``), so
    a ``diff -ru`` between release folders or a diff without ``a/`` names the task's paths."""
    known = set().union(*_path_hints().values())
    folders = {str(parent) for path in known for parent in PurePosixPath(path).parents if str(parent) != "."}
    depth = strip_depth(sections, known.__contains__, folders.__contains__)
    return [restripped(section, depth) for section in sections]


def infer_task(diff: str) -> tuple[str | None, str]:
    """Tell the task from the pre-image blobs a diff names, else the paths it touches, else the modules it uses."""
    sections = parse_sections(diff)
    if not sections:
        return None, "the diff names no file"
    sections = stripped_to_known_paths(sections)
    recipes = all_base_recipes()
    blob_votes: Counter[str] = Counter()
    path_votes: Counter[str] = Counter()
    module_votes: Counter[str] = Counter()
    for section in sections:
        for task, recipe in recipes.items():
            expected = recipe.blobs.get(section.path)
            if expected and section.pre_blob and section.pre_blob.startswith(expected[:7]):
                blob_votes[task] += 1
            if section.path in _path_hints()[task]:
                path_votes[task] += 1
    referenced = referenced_module_files(diff)
    for task, hints in _path_hints().items():
        module_votes[task] = len(referenced & hints)
    module_votes = +module_votes
    for votes, evidence in ((blob_votes, "pre-image blob"), (path_votes, "touched path"),
                            (module_votes, "referenced module")):
        if not votes:
            continue
        ranked = votes.most_common()
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            tied = ", ".join(t for t, n in ranked if n == ranked[0][1])
            return None, f"ambiguous: {evidence}s match {tied} equally"
        return ranked[0][0], f"{ranked[0][1]} {evidence} match(es) with {ranked[0][0]}"
    touched = ", ".join(sorted({s.path for s in sections})[:5])
    return None, f"no touched file or pre-image blob belongs to a known task (touches {touched})"


def _candidate(cid: str, source: str, diff: str, task: str | None, **extra) -> Candidate:
    if task is not None:
        return Candidate(cid, source, diff, task=task, task_reason="given", **extra)
    inferred, reason = infer_task(diff) if diff.strip() else (None, "empty diff")
    return Candidate(cid, source, diff, task=inferred, task_reason=reason, **extra)


def is_bundle(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(8192)
    head = head[:len(head) // 4 * 4] if len(head) >= 4 else head  # whole UTF-16 and UTF-32 units
    try:
        first = decode_input(head, "replace").split("\n", 1)[0].strip()
    except UnreadableEncoding:
        return False
    return bool(re.match(r"^https?://\S+$", first))


def _is_paragraph_start(line: str, previous_blank: bool) -> bool:
    return previous_blank and bool(line.strip()) and not line.startswith(DIFF_LINE_STARTS)


def _last_hunk_needs(lines: list[str]) -> bool:
    """Whether the diff in ``lines`` ends inside a hunk, so that one more context line belongs to it."""
    sections = parse_sections("\n".join(lines) + "\n")
    return bool(sections and sections[-1].hunks and not sections[-1].hunks[-1].complete)


def bundle_entry_id(stem: str, paragraph: str | None, body: list[str]) -> str:
    """A bundle entry's id: ``<stem>-<hash>``, the hash of the entry's own text (its paragraph and diff, or its
    no-diff line), so an id, and the test names and history that follow it, stay the same when the bundle is
    reordered. Two entries alike in every byte get one id, told apart by ``unique_ids``; its position is only a
    label (``source`` and ``bundle_position``)."""
    digest = hashlib.sha256("\n".join([paragraph or "", *body]).encode("utf-8", "surrogateescape")).hexdigest()
    return f"{stem}-{digest[:10]}"


def parse_bundle(path: Path, task: str | None = None) -> list[Candidate]:
    """Read a bundle file into candidates (ids: ``bundle_entry_id``) keeping each verdict as
    ``reference_summary``."""
    try:
        lines = decode_input(path.read_bytes(), "replace").splitlines()
    except UnreadableEncoding as exc:
        raise IngestError(f"{path}: {exc}") from None
    entries: list[tuple[str | None, list[str]]] = []
    previous_blank = True
    for line in lines[1:]:
        if NO_DIFF.match(line) and previous_blank:
            entries.append((None, [line]))
        elif _is_paragraph_start(line, previous_blank):
            entries.append((line, []))
        elif entries:
            entries[-1][1].append(line)
        previous_blank = not line.strip()
    candidates = []
    for position, (paragraph, body) in enumerate(entries):
        source = f"{path}#{position}"
        if paragraph is None:
            reason = NO_DIFF.match(body[0]).group(1)
            candidates.append(Candidate(bundle_entry_id(path.stem, None, body[:1]), source, "", task=task,
                                        task_reason=f"no diff captured ({reason})", bundle_position=position))
            continue
        # The blank lines between entries are empty; a diff's last line may be a blank context line, " ".
        while body and not body[-1].strip() and not (body[-1].startswith(" ") and _last_hunk_needs(body[:-1])):
            body.pop()
        while body and not body[0].strip():
            body.pop(0)
        diff = "\n".join(body) + "\n" if body else ""
        candidates.append(_candidate(bundle_entry_id(path.stem, paragraph, body), source, diff, task,
                                     reference_summary=paragraph, bundle_position=position,
                                     at_preview_limit=len(body) >= PREVIEW_LINES))
    return candidates


# Byte-order marks, longest first (UTF-32's little-endian mark begins with UTF-16's).
BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le", "UTF-32 (little-endian)"),
        (b"\x00\x00\xfe\xff", "utf-32-be", "UTF-32 (big-endian)"),
        (b"\xef\xbb\xbf", "utf-8", "UTF-8 with a byte-order mark"),
        (b"\xff\xfe", "utf-16-le", "UTF-16 (little-endian)"),
        (b"\xfe\xff", "utf-16-be", "UTF-16 (big-endian)"))


class UnreadableEncoding(ValueError):
    """An input is in an encoding that cannot be decoded as the one it shows; the message names it."""


def text_encoding(data: bytes) -> tuple[str, str, int]:
    """(codec, its name for people, bytes of mark to skip) of an input: a byte-order mark, else UTF-16 without
    one when every other byte of its start is NUL (the ASCII of a diff written by an editor in UTF-16), else
    UTF-8."""
    for mark, codec, name in BOMS:
        if data.startswith(mark):
            return codec, name, len(mark)
    head = data[:4096]
    if len(head) >= 4 and len(head) % 2 == 0:
        if not any(head[1::2]) and all(head[0::2]):
            return "utf-16-le", "UTF-16 (little-endian, no byte-order mark)", 0
        if not any(head[0::2]) and all(head[1::2]):
            return "utf-16-be", "UTF-16 (big-endian, no byte-order mark)", 0
    return "utf-8", "UTF-8", 0


def decode_input(data: bytes, errors: str = "surrogateescape") -> str:
    """An input's text, in the encoding its bytes show (``text_encoding``). UTF-8 keeps a byte that is not UTF-8
    as data (``errors``); another encoding must decode whole, else ``UnreadableEncoding`` names it."""
    codec, name, skip = text_encoding(data)
    if codec == "utf-8":
        return data[skip:].decode("utf-8", errors)
    try:
        return data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        raise UnreadableEncoding(f"the file is {name} but does not decode as it (byte {exc.start + skip}: "
                                 f"{exc.reason}); save it as UTF-8") from None


def _read_diff(path: Path, cid: str, task: str | None) -> Candidate:
    try:
        # Bytes as they are: text mode would turn the "\r\n" of a CRLF file's lines into "\n". A byte that is not
        # UTF-8 (a raw file name) is data, kept for git by surrogateescape.
        diff = decode_input(path.read_bytes())
    except (OSError, UnreadableEncoding) as exc:
        return Candidate(cid, str(path), "", task=task, ingest_error=f"cannot read {path}: {exc}")
    return _candidate(cid, str(path), diff, task)


def entry_problem(path: Path) -> str | None:
    """Why a directory entry cannot be read as a diff (a FIFO, a socket, a device, a link to nothing or a loop of
    links), or None for a regular file (or a link to one) or a folder."""
    try:
        info = path.stat()
    except OSError as exc:
        if path.is_symlink():
            if exc.errno == errno.ELOOP:
                return "a loop of symbolic links"
            return f"a symbolic link to {os.readlink(path)!r}, which does not exist"
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode):
        return None
    kinds = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
             stat.S_IFBLK: "a block device"}
    return f"{kinds.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, not a regular file"


def directory_entries(root: Path) -> list[tuple[Path, str | None]]:
    """Every entry under ``root`` that may be a candidate, in path order, with ``entry_problem``'s reason for one
    that cannot be read: files with a diff suffix, and links that lead nowhere or in a loop (they might be either,
    so they are named rather than dropped). Linked folders are followed once each."""
    found: list[tuple[Path, str | None]] = []
    seen: set[str] = set()
    pending = [root]
    while pending:
        folder = pending.pop()
        real = os.path.realpath(folder)
        if real in seen:
            continue
        seen.add(real)
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            found.append((folder, f"a folder that cannot be listed ({exc.strerror or exc})"))
            continue
        for name in names:
            path = folder / name
            problem = entry_problem(path)
            if problem is None and path.is_dir():
                pending.append(path)
            elif path.suffix in DIFF_SUFFIXES or (problem and path.is_symlink()):
                found.append((path, problem))
    return sorted(found)


def scan_directory(root: Path, task: str | None = None) -> list[Candidate]:
    """Candidates under ``root``: ``<task-id>/<name>.diff`` takes its task from the folder, others are inferred.
    An entry that cannot be read as a file (``directory_entries``) is a candidate with its reason as the ingest
    error, so the report and the exit code name it."""
    known = set(all_base_recipes())
    candidates = []
    for path, problem in directory_entries(root):
        rel = path.relative_to(root)
        folder_task = rel.parts[0] if len(rel.parts) > 1 and rel.parts[0] in known else None
        cid = (rel.with_suffix("") if path.suffix in DIFF_SUFFIXES else rel).as_posix()
        if problem:
            candidates.append(Candidate(cid, str(path), "", task=task or folder_task,
                                        ingest_error=f"{path} is {problem}: it cannot be graded"))
        else:
            candidates.append(_read_diff(path, cid, task or folder_task))
    return candidates


def ingest(paths: list[Path], task: str | None = None) -> list[Candidate]:
    """All candidates from the given inputs, in input order; ids are unique."""
    candidates: list[Candidate] = []
    for path in paths:
        if path.is_dir():
            candidates.extend(scan_directory(path, task))
        elif path.is_file() and is_bundle(path):
            candidates.extend(parse_bundle(path, task))
        elif path.is_file():
            candidates.append(_read_diff(path, path.stem, task))
        elif os.path.lexists(path):
            raise IngestError(f"{path}: {entry_problem(path) or 'neither a file nor a folder'}")
        else:
            raise IngestError(f"{path}: no such file or directory")
    return unique_ids([cleaned(candidate) for candidate in candidates])


def cleaned(candidate: Candidate) -> Candidate:
    """The candidate with every text it names cleaned for the records (``grader.core.sanitize``); the diff stays
    as written, it is git's input."""
    optional = {name: clean(value) for name in ("reference_summary", "ingest_error")
                if (value := getattr(candidate, name)) is not None}
    return replace(candidate, id=clean(candidate.id, limit=ID_LIMIT), source=clean(candidate.source),
                   task_reason=clean(candidate.task_reason), **optional)


def unique_ids(candidates: list[Candidate]) -> list[Candidate]:
    """Candidates with unique ids: a repeated id gets ``~2``, ``~3`` ..., skipping any suffixed id that is
    already taken, so no two candidates ever share a page, a store file or a row."""
    taken = {candidate.id for candidate in candidates}
    assigned: set[str] = set()
    unique = []
    for candidate in candidates:
        cid = candidate.id
        if cid in assigned:
            n = 2
            while f"{cid}~{n}" in taken or f"{cid}~{n}" in assigned:
                n += 1
            cid = f"{cid}~{n}"
        assigned.add(cid)
        unique.append(replace(candidate, id=cid) if cid != candidate.id else candidate)
    return unique


def shard(candidates: list[Candidate], index: int, count: int) -> list[Candidate]:
    """Shard ``index`` (1-based) of ``count``: every ``count``-th candidate in input order, starting at ``index``.
    The shards of one input are disjoint and together hold every candidate, so their outputs merge whole."""
    if not 1 <= index <= count:
        raise IngestError(f"shard {index}/{count}: the shard must be between 1 and {count}")
    return candidates[index - 1::count]
