"""Application: give each candidate a fresh worktree of its base and apply its diff with per-hunk diagnostics.

Methods are tried from strict to lenient (git apply; git apply -C1 --recount; GNU patch --fuzz) and the one
that worked is recorded. Truncated hunks are dropped before applying and reported: in a cut preview they are
where the preview stops; in a whole diff they are a corrupt patch (git apply refuses it), so a whole diff whose
every hunk ends early is not applied at all.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import stat
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

from grader.pipeline.checkout import MANIFEST, is_whole, tree_manifest
from grader.core.paths import cache_dir, remove_tree, scratch_root
from grader.pipeline.diffparse import (BadPath, FileSection, ParsedDiff, is_header_only_change, parse_diff, render,
                              restripped, strip_depth, unquote_c)
from grader.core.records import ApplyReport, BuiltBase, FileChange, FileReport, HunkReport
from grader.core.rubric import REPO_ROOT
from grader.sandbox.tooling import failed_copy_error, run_tool

MAX_DIFF_BYTES = 1 << 20
BINARY_DIFFER = re.compile(r"^Binary files .* differ\r?$")
# Files that execute or configure on their own when a tree is on sys.path or is pytest's root.
SELF_EXECUTING_NAMES = {"sitecustomize.py", "usercustomize.py", "conftest.py", "pytest.ini", "tox.ini"}
# The only file modes a candidate may write: a regular file, executable or not (parsed as octal, as git does).
ALLOWED_MODES = {0o100644, 0o100755}
MODE_NAMES = {0o120000: "a symbolic link", 0o160000: "a gitlink (submodule)", 0o040000: "a directory"}
METHODS = (
    ("git apply", ["git", "apply", "-v", "--whitespace=nowarn"]),
    ("git apply -C1 --recount", ["git", "apply", "-v", "--whitespace=nowarn", "-C1", "--recount"]),
    ("patch --fuzz=3", ["patch", "-p1", "--fuzz=3", "--forward", "--batch", "--no-backup-if-mismatch",
                        "--reject-file=-", "--verbose"]),
)
HUNK_RESULT = re.compile(r"^Hunk #(\d+) (succeeded|FAILED) at (\d+)"
                         r"(?: with fuzz (\d+))?(?: \(offset (-?\d+) lines?\))?")
# git's identity of the applied tree is computed with stat checks that survive a copy (mtime and size only).
GIT_IDENTITY = ["git", "-c", "core.checkStat=minimal", "-c", "core.trustctime=false", "-c", "core.autocrlf=false",
                "-c", "core.attributesFile=/dev/null", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
# No machine-wide or user git configuration (a filter driver, an fsmonitor program) takes part in identifying a tree.
GIT_IDENTITY_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1"}
# Identity is the bytes that run: every attribute that would let git read or write a file other than byte for byte
# (end-of-line conversion, ident, filters, a working-tree encoding), unset for every path. Written into a tree's
# own .git/info/attributes, which outranks any .gitattributes a candidate writes into the tree.
RAW_BYTES_ATTRIBUTES = "* -text -crlf -ident -filter -eol -working-tree-encoding -export-subst\n"


class UnsafeDiff(Exception):
    """The diff must not be applied at all."""


class UnsoundGround(OSError):
    """What an apply stood on was not sound: the base changed or vanished, the tree was not a whole copy of it, an
    apply tool was killed, or the same tools failed the task's reference fix on the same base. No verdict can be
    told from it; as an OSError it is the candidate's ``environment_error``, never stored and never replayed."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EIO, reason)


# A tool ended by a signal gave no answer about the diff; SIGXCPU is its CPU limit, the time the diff cost.
SIGNAL_EXITS = {128 + n for n in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGABRT, signal.SIGSEGV,
                                  signal.SIGBUS, signal.SIGHUP)}


def hidden_roots() -> list[Path]:
    """What no tool run over a diff and no subject may see: the repository (reference fixes, candidates, hidden
    tests), the grader's caches (bases, evidence, the judge secret) and the scratch area (other candidates' trees,
    judge folders), and the grader's home."""
    return [REPO_ROOT, cache_dir(), scratch_root(), Path.home()]


def _check_path(path: str) -> None:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or path.startswith("~"):
        raise UnsafeDiff(f"path {path!r} points outside the tree")
    if any(ord(ch) < 32 or ch == "\x7f" for ch in path):
        raise UnsafeDiff(f"path {path!r} contains control characters")
    if any(part.lower() == ".git" for part in pure.parts):
        raise UnsafeDiff(f"path {path!r} writes into git metadata")


def check_safety(diff: str, sections: list[FileSection]) -> None:
    """Reject oversized and path-escaping diffs, and any mode but a regular file's, before anything
    touches a tree. Names are checked as git decodes them (C-quoted names, copy and rename sources)."""
    size = len(diff.encode("utf-8", "surrogateescape"))
    if size > MAX_DIFF_BYTES:
        raise UnsafeDiff(f"diff is {size} bytes, over the {MAX_DIFF_BYTES}-byte limit")
    for section in sections:
        if section.header_error:
            raise UnsafeDiff(f"{section.path or 'a file header'}: {section.header_error}")
        for path in _named_paths(section):
            _check_path(path)
        for text in section.modes:
            mode = int(text, 8) if text and all(c in "01234567" for c in text) else None
            if mode not in ALLOWED_MODES:
                what = MODE_NAMES.get(mode & 0o170000 if mode is not None else -1, f"mode {text!r}")
                raise UnsafeDiff(f"{section.path}: {what} is not accepted (only regular files)")


def _named_paths(section: FileSection) -> list[str]:
    """Every path a section names, decoded (tools differ in which lines they use, so all of them must be safe)."""
    paths = [section.old_path, section.new_path, *section.named]
    return [p for p in dict.fromkeys(paths) if p not in (None, "", "/dev/null")]


def stripped_to_tree(sections: list[FileSection], tree: Path) -> list[FileSection]:
    """The sections with their names stripped to the tree's paths (``strip_depth``: a ``diff -ru`` between
    release folders, a diff without ``a/``), in git's form, so that every method applies them alike. What could
    escape the tree is judged by ``check_safety`` on these names, and on the names as written before."""
    def inside(rel: str) -> Path | None:
        path = tree / rel
        return None if _escapes_tree(tree, rel) else path

    def is_file(rel: str) -> bool:
        return bool((path := inside(rel)) and path.is_file())

    def is_dir(rel: str) -> bool:
        return bool((path := inside(rel)) and path.is_dir())

    depth = strip_depth(sections, is_file, is_dir)
    return [restripped(section, depth) for section in sections]


def is_cut_header(section: FileSection) -> bool:
    """A preview cut inside a file header: no hunk and no header-only change (mode, rename, empty file)."""
    return not section.hunks and not is_header_only_change(section)


def _escapes_tree(tree: Path, rel: str) -> bool:
    resolved = (tree / rel).resolve()
    return not resolved.is_relative_to(tree.resolve())


def _is_self_executing(path: str) -> bool:
    name = PurePosixPath(path).name
    return name in SELF_EXECUTING_NAMES or name.endswith(".pth")


def _touches_self_executing(section: FileSection) -> bool:
    return any(_is_self_executing(p) for p in _named_paths(section))


def _change_of(section: FileSection) -> FileChange:
    header = "\n".join(section.header)
    if "new file mode" in header or section.old_path == "/dev/null":
        return "added"
    if "deleted file mode" in header or section.new_path == "/dev/null":
        return "deleted"
    if "rename from" in header:
        return "renamed"
    if "copy from" in header:
        return "added"
    return "modified"


def make_tree(base: BuiltBase, parent: Path) -> Path:
    """A private copy of the base's files (not its git data), so nothing a candidate does reaches the base.

    Its repository of its own keeps git apply from resolving paths against an enclosing one; it borrows the
    base's objects (alternates) and index, and its HEAD is the base's commit, so what was applied can be
    listed and identified in milliseconds (``applied_tree``). Its attributes make git read and write every file
    as raw bytes, whatever .gitattributes the diff adds (``RAW_BYTES_ATTRIBUTES``)."""
    tree = Path(tempfile.mkdtemp(prefix="tree-", dir=parent))
    os.chmod(tree, 0o755)
    entries = [str(p) for p in base.path.iterdir() if p.name != ".git"]
    copied = subprocess.run(["cp", "-a", "--reflink=auto", *entries, str(tree)], capture_output=True, text=True)
    if copied.returncode != 0:
        raise failed_copy_error(copied.stderr, tree)
    subprocess.run(["git", "init", "-q", str(tree)], check=True, capture_output=True)
    info = tree / ".git" / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text(RAW_BYTES_ATTRIBUTES)
    base_git = base.path / ".git"
    if (base_git / "objects").is_dir() and (base_git / "index").is_file():
        (tree / ".git" / "objects" / "info" / "alternates").write_text(str(base_git / "objects") + "\n")
        (tree / ".git" / "index").write_bytes((base_git / "index").read_bytes())
        linked = subprocess.run(["git", "-C", str(tree), "update-ref", "HEAD", base.commit], capture_output=True,
                                text=True)
        if linked.returncode != 0:  # the base's commit is not among its objects any more
            raise UnsoundGround(f"the base of {base.task} at {base.path} has lost its commit {base.commit[:12]}: "
                                f"{linked.stderr.strip()[-300:]}")
    return tree


def _run_method(argv: list[str], patch_text: str, tree: Path, contained: bool,
                touched: list[str]) -> tuple[bool, str]:
    """One apply tool over the tree, as an unprivileged user that sees only the tree and may write only the
    files the diff names (and the folders they are in)."""
    code, output = run_tool(argv, tree, patch_text, hidden_roots(), contained=contained, touched=touched)
    if code is not None and ((code < 0 and -code != signal.SIGXCPU) or code in SIGNAL_EXITS):
        raise UnsoundGround(f"the apply tool {argv[0]} was ended by a signal (exit {code}): it gave no answer "
                            "about the diff")
    return code == 0, output


def applied_tree(tree: Path) -> tuple[str, list[tuple[int, str, str]]]:
    """The applied tree's identity (git's tree hash of every file in it) and what differs from the base:
    (new mode, status letter, path) per changed path, as git sees the files, not as any parser read the diff."""
    def git(*args: str) -> str:
        # Paths are git's bytes; one that is not UTF-8 reads as the diff parser decoded it (surrogateescape).
        return subprocess.run([*GIT_IDENTITY, *args], cwd=tree, check=True, capture_output=True,
                              text=True, errors="surrogateescape", env={**os.environ, **GIT_IDENTITY_ENV}).stdout

    git("add", "-A", "-f", ".")
    identity = git("write-tree").strip()
    head = subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=tree, capture_output=True,
                          text=True).stdout.strip()
    against = head or git("hash-object", "-t", "tree", "/dev/null").strip()
    parts = git("diff-index", "--cached", "--raw", "-z", "--no-renames", against).split("\0")
    changes = []
    for meta, path in zip(parts[0::2], parts[1::2]):
        fields = meta.lstrip(":").split()
        changes.append((int(fields[1], 8), fields[4], path))
    return identity, changes


def verify_applied(tree: Path, changes: list[tuple[int, str, str]], named: set[str]) -> str | None:
    """Why the applied tree must not be graded, or None: a changed path the diff does not name, a link or any
    non-regular file among the changes."""
    for mode, status, path in changes:
        if path not in named:
            return f"{path!r} changed although the diff does not name it"
        if status == "D":
            continue
        if mode not in ALLOWED_MODES:
            return f"{path!r} was written as {MODE_NAMES.get(mode & 0o170000, oct(mode))}"
        info = os.lstat(tree / path)
        if not stat.S_ISREG(info.st_mode):
            return f"{path!r} is not a regular file after applying"
    return None


def _hunk_results(output: str) -> dict[str, dict[int, HunkReport]]:
    """Per file, the hunks that the tool's verbose output reports as offset, fuzzed or failed."""
    results: dict[str, dict[int, HunkReport]] = {}
    current = None
    for line in output.splitlines():
        for prefix in ("Checking patch ", "patching file "):
            if line.startswith(prefix):
                current = _reported_name(line[len(prefix):])
                results.setdefault(current, {})
        if line.startswith(("can't find file to patch", "No file to patch")):
            current = None  # patch names no file here; its hunk lines are not the previous file's
        match = HUNK_RESULT.match(line)
        if match and current is not None:
            number, outcome, at, fuzz, offset = match.groups()
            if outcome == "FAILED":
                report = HunkReport("", "failed", f"context not found (tried at line {at})")
            elif fuzz:
                report = HunkReport("", "fuzz", f"applied at line {at} with fuzz {fuzz}")
            elif offset:
                report = HunkReport("", "offset", f"applied at line {at} (offset {offset} lines)")
            else:  # patch names every hunk, also those that applied where the header said
                report = HunkReport("", "applied", "")
            results[current][int(number)] = report
    return results


def _reported_name(name: str) -> str:
    """The path a tool's progress line names: git's ``old => new...``, patch's ``new (renamed from old)``."""
    name = name.strip().removesuffix("...")
    name = re.sub(r" \((?:renamed|copied) from .*\)$", "", name).split(" => ")[-1].strip()
    if len(name) > 1 and name[0] == name[-1] == '"':  # git's C quoting (a byte that is not UTF-8, a quote)
        try:
            return unquote_c(name)[0]
        except BadPath:
            return name[1:-1]
    return name[1:-1] if len(name) > 1 and name[0] == name[-1] == "'" else name


def _file_reports(sections: list[FileSection], output: str, applied: bool, whole: bool = False) -> list[FileReport]:
    """Per-hunk outcome; ``applied`` says how hunks the tool did not mention ended (git is silent on clean ones);
    ``whole``: the tool applies all or nothing (git apply), so a success applied every file, however its progress
    lines name them."""
    results = _hunk_results(output)
    reports = []
    for section in sections:
        complete = [h for h in section.hunks if h.complete]
        per_hunk = results.get(section.path, {})
        file_applied = applied and (whole or section.path in results or not output)
        hunks = []
        for number, hunk in enumerate(complete, start=1):
            found = per_hunk.get(number)
            if found is None:
                found = HunkReport("", "applied" if file_applied else "failed", "" if file_applied else "not applied")
            hunks.append(HunkReport(hunk.header, found.status, found.detail))
        hunks += [HunkReport(h.header, "truncated", f"cut off after {len(h.lines)} lines; not applied")
                  for h in section.hunks if not h.complete]
        if section is sections[-1] and is_cut_header(section):
            hunks.append(HunkReport("", "truncated", "cut off inside the file header; no hunk shown"))
        reports.append(FileReport(section.path, _change_of(section), hunks))
    return reports


def is_binary(section: FileSection) -> bool:
    """A file changed as binary: git's binary patch, or diff's "Binary files ... differ" (no content at all)."""
    return any(line == "GIT binary patch" or BINARY_DIFFER.match(line) for line in section.header)


def split_binary(sections: list[FileSection]) -> tuple[list[FileSection], list[str]]:
    """The text sections, and the paths of the binary ones: the grader applies text only."""
    return [s for s in sections if not is_binary(s)], [s.path for s in sections if is_binary(s)]


def _drop_self_executing(sections: list[FileSection]) -> tuple[list[FileSection], list[str]]:
    kept, dropped = [], []
    for section in sections:
        (dropped if _touches_self_executing(section) else kept).append(section)
    return kept, [s.path for s in dropped]


def apply_diff(diff: ParsedDiff | str, tree: Path, contained: bool = True, cut_preview: bool = True) -> ApplyReport:
    """Apply ``diff`` (read once by ``parse_diff``; text is read here) inside ``tree`` and report per file and
    hunk; raises nothing for bad diffs. ``cut_preview``: the diff is a preview that may stop anywhere (else it is
    a whole diff, and hunks that end early are corruption)."""
    parsed = diff if isinstance(diff, ParsedDiff) else parse_diff(diff)
    diff = parsed.text
    if not diff.strip():
        return ApplyReport("empty", message="the candidate has no diff")
    sections = list(parsed.sections)
    if not sections:
        return ApplyReport("failed", message="no file sections found: not a unified diff")
    try:
        check_safety(diff, sections)
        sections = stripped_to_tree(sections, tree)
        check_safety(diff, sections)
    except UnsafeDiff as exc:
        return ApplyReport("rejected", message=str(exc))
    escaping = [p for s in sections for p in _named_paths(s) if _escapes_tree(tree, p)]
    if escaping:
        return ApplyReport("rejected", message=f"path {escaping[0]!r} resolves outside the tree through a link")
    sections, neutralized = _drop_self_executing(sections)
    sections, binary = split_binary(sections)
    if binary and not sections:
        return ApplyReport("failed", message="the diff changes only binary files, which the grader does not apply: "
                           + ", ".join(binary), neutralized=neutralized, binary=binary)
    report = apply_text(sections, neutralized, tree, contained, cut_preview)
    if not binary:
        return report
    note = "binary files are not applied: " + ", ".join(binary)
    return replace(report, status="partial" if report.status == "applied" else report.status, binary=binary,
                   message="; ".join(m for m in (report.message, note) if m))


def apply_text(sections: list[FileSection], neutralized: list[str], tree: Path, contained: bool,
               cut_preview: bool = True) -> ApplyReport:
    """Apply the text sections of a diff that passed the safety checks."""
    # A preview cut inside the last file's header shows no hunk of it: that is truncation too.
    truncated = any(not h.complete for s in sections for h in s.hunks) or is_cut_header(sections[-1]) \
        if sections else False
    patch_text = render(sections)
    if not patch_text:
        files = _file_reports(sections, "", False)
        if truncated and not cut_preview:
            return ApplyReport("failed", None, files, True, "every hunk ends before the line counts its header "
                               "gives: the diff is corrupt and git apply refuses it", neutralized)
        if truncated:
            # What the preview shows is applied, and here that is nothing: the tree stays the base.
            return _identified(ApplyReport("partial", None, files, True, "every hunk was cut off; the base is graded",
                                           neutralized), tree, set())
        if neutralized:
            # A neutralised file simply does not land: what is left of the diff (here nothing) is graded.
            return _identified(ApplyReport("applied", None, files, False, "every file it touches would run on its "
                                           "own and was not applied; the base is graded", neutralized), tree, set())
        return ApplyReport("failed", None, files, False, "nothing to apply", neutralized)
    named = {p for s in sections for p in _named_paths(s)}
    output = ""
    for name, argv in METHODS:
        ok, output = _run_method(argv, patch_text, tree, contained, sorted(named))
        if ok:
            if argv[0] == "git" and (problem := added_bytes_problem(sections, tree)):
                raise UnsoundGround(f"{name} reported success but {problem}")
            files = _file_reports(sections, output, True, whole=argv[0] == "git")
            status = "partial" if truncated else "applied"
            dropped = ("truncated hunks were dropped" if cut_preview else
                       "hunks that end early (a corrupt diff, which git apply refuses) were dropped")
            message = dropped if truncated else ""
            return _identified(ApplyReport(status, name, files, truncated, message, neutralized), tree, named)
    # The last method (patch) applies what it can; see whether anything landed.
    files = _file_reports(sections, output, True)
    if not any(h.status != "failed" for f in files for h in f.hunks if h.status != "truncated"):
        files = _file_reports(sections, output, False)
        return ApplyReport("failed", None, files, truncated, _first_error(output), neutralized)
    return _identified(ApplyReport("partial", METHODS[-1][0], files, truncated, "some hunks failed to apply",
                                   neutralized), tree, named)


def added_bytes_problem(sections: list[FileSection], tree: Path) -> str | None:
    """Where a file the diff adds whole (one section, only added lines) is not in the tree byte for byte as the
    diff writes it, what differs; None when every such file is. (A tool that wrote another name or other bytes
    leaves a tree whose key is not the diff's.)"""
    counts: dict[str, int] = {}
    for section in sections:
        counts[section.path] = counts.get(section.path, 0) + 1
    for section in sections:
        lines = [line for hunk in section.hunks for line in hunk.lines]
        if _change_of(section) != "added" or counts[section.path] != 1 or not section.hunks or \
                not all(h.complete for h in section.hunks) or not all(line[:1] in "+\\" for line in lines):
            continue
        expected = "".join(line[1:] + "\n" for line in lines if line.startswith("+"))
        if lines and lines[-1].startswith("\\"):
            expected = expected[:-1]
        try:
            written = (tree / section.path).read_bytes()
        except OSError as exc:
            return f"{section.path!r}, which the diff adds, cannot be read in the tree ({exc.strerror or exc})"
        if written != expected.encode("utf-8", "surrogateescape"):
            return f"{section.path!r}, which the diff adds, holds other bytes than the diff writes"
    return None


def _identified(report: ApplyReport, tree: Path, named: set[str]) -> ApplyReport:
    """The report with the applied tree's identity, or a rejection when the tree holds what the diff did not say."""
    identity, changes = applied_tree(tree)
    problem = verify_applied(tree, changes, named)
    if problem:
        return ApplyReport("rejected", report.method, report.files, report.truncated, problem, report.neutralized)
    return replace(report, tree_id=identity)


def reference_diff(task_id: str) -> str | None:
    """The task's reference fix (``reference_impl/<task>.diff``), None where the task has none."""
    try:
        return (REPO_ROOT / "reference_impl" / f"{task_id}.diff").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def copy_problem(base: BuiltBase, tree: Path) -> str | None:
    """Why ``tree`` (made by ``make_tree``) is not a whole copy of the base as it was built, or None: every file of
    the build's manifest there with its size and time, nothing more."""
    try:
        built = json.loads((base.path / ".git" / MANIFEST).read_text())
        copied = tree_manifest(tree)
    except (OSError, ValueError) as exc:
        return f"the base of {base.task} at {base.path} cannot be read ({exc})"
    if {rel: entry[:2] for rel, entry in built.items()} != {rel: entry[:2] for rel, entry in copied.items()}:
        missing = sorted(set(built) - set(copied))
        return (f"the tree made from the base of {base.task} is not a whole copy of it"
                + (f" ({missing[0]} is missing)" if missing else "") + ": the base changed or vanished meanwhile")
    return None


def base_problem(base: BuiltBase) -> str | None:
    """Why the base is not the tree its build recorded now (a file changed or removed, its git objects gone)."""
    if not is_whole(base.path) or not (base.path / ".git" / "objects").is_dir():
        return f"the base of {base.task} at {base.path} changed or vanished during grading"
    return None


def sound_apply(base: BuiltBase, diff: ParsedDiff, tree: Path, reference: str | None, contained: bool = True,
                cut_preview: bool = True) -> ApplyReport:
    """``apply_diff`` over ``tree`` (a fresh ``make_tree`` of ``base``), its report only when what it stood on
    was sound; else ``UnsoundGround``. The tree must be a whole copy of the base, and the base's objects (which
    the tree borrows) there after the apply; an apply that failed (or a tree rejected after applying) is the
    candidate's only when the task's reference fix, applied by the same tools to a fresh tree of the same base in
    this run, applies, and the base is whole afterwards."""
    try:
        return _sound_apply(base, diff, tree, reference, contained, cut_preview)
    except subprocess.CalledProcessError as exc:  # git could not read the tree's objects: were they the base's?
        problem = base_problem(base)
        if problem:
            raise UnsoundGround(problem) from None
        raise


def _sound_apply(base: BuiltBase, diff: ParsedDiff, tree: Path, reference: str | None, contained: bool,
                 cut_preview: bool) -> ApplyReport:
    problem = copy_problem(base, tree)
    if problem:
        raise UnsoundGround(problem)
    report = apply_diff(diff, tree, contained, cut_preview)
    if reference is not None and (report.status == "failed" or report.status == "rejected" and report.method):
        check = make_tree(base, tree.parent)
        try:
            control = apply_diff(reference, check, contained, cut_preview=False)
        finally:
            remove_tree(check)
        if control.status != "applied":
            raise UnsoundGround(f"the diff did not apply ({report.message}), and the task's reference fix does "
                                f"not apply to the same base here either ({control.status}: {control.message}): "
                                "the base or the tools are not sound")
        problem = base_problem(base)
    else:  # the tree was proven a whole copy before the apply; what it still borrows from the base is its objects
        problem = None if (base.path / ".git" / "objects").is_dir() else \
            f"the base of {base.task} at {base.path} lost its git objects during the apply"
    if problem:
        raise UnsoundGround(problem)
    return report


def _first_error(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("error:", "patch:")) or "FAILED" in line or "can't find file" in line:
            return line.strip()
    return output.strip().splitlines()[-1] if output.strip() else "the patch did not apply"
