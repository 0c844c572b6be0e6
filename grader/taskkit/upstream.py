"""``new-task --from-upstream VERSION``: a task's reference fix read off upstream's own change.

The base is built from its sdist as every base is; the later sdist (fetched the same way, into the same cache) is
read as a tarball. Between the two, the files the author names (``--files``), or else the changed files that the
task's description names, give the reference diff, written as ``git diff`` writes it (with the pre-image blobs in
its ``index`` lines, which is how a diff's task is told) and checked to apply to the built base.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.pipeline.checkout import obtain_sdist

BLOB_ABBREVIATION = 7


class UpstreamError(Exception):
    """Upstream's change cannot give the reference as asked (no such file, no change, nothing proposed)."""


@dataclass(frozen=True)
class UpstreamChange:
    """The reference diff read from upstream, and what it was read from."""

    version: str
    files: list[str]   # the files the diff changes, in order
    proposed: bool     # chosen from the description (not named with --files)
    diff: str


def git_blob(data: bytes) -> str:
    """Git's blob hash of ``data`` (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sdist_files(tarball: Path, version: str) -> dict[str, bytes]:
    """Every regular file of the sdist, by its path below the sdist's root folder."""
    prefix = f"vllm-{version}/"
    found = {}
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                handle = tar.extractfile(member)
                if handle is not None:
                    found[member.name[len(prefix):]] = handle.read()
    return found


def tree_files(tree: Path) -> dict[str, bytes]:
    """The files of the built base below vllm/ (what a task's candidates change), by relative path."""
    return {p.relative_to(tree).as_posix(): p.read_bytes() for p in sorted((tree / "vllm").rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def changed_files(old: dict[str, bytes], new: dict[str, bytes]) -> list[str]:
    """The Python files under vllm/ that differ between the two trees (added ones too), sorted."""
    paths = {p for p in (*old, *new) if p.startswith("vllm/") and p.endswith(".py")}
    return sorted(p for p in paths if old.get(p) != new.get(p))


def named_in(description: str, path: str) -> bool:
    """Whether the description names ``path``: as the path, as its dotted module, or by its file name (with or
    without ``.py``; an ``__init__.py`` by its package's name)."""
    pure = PurePosixPath(path)
    module = ".".join(pure.with_suffix("").parts).removesuffix(".__init__")
    stem = pure.parent.name if pure.stem == "__init__" else pure.stem
    words = {path, module, pure.name, stem}
    return any(re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", description) for word in words if len(word) > 3)


def propose_files(changed: list[str], description: str) -> list[str]:
    """The changed files the description names."""
    return [p for p in changed if named_in(description, p)]


def text_lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="surrogateescape").splitlines(keepends=True)


def file_diff(path: str, old: bytes | None, new: bytes) -> str:
    """One file's section as ``git diff`` writes it (``old`` None: the file is new)."""
    old_blob = git_blob(old)[:BLOB_ABBREVIATION] if old is not None else "0" * BLOB_ABBREVIATION
    header = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        header.append("new file mode 100644\n")
        header.append(f"index {old_blob}..{git_blob(new)[:BLOB_ABBREVIATION]}\n")
    else:
        header.append(f"index {old_blob}..{git_blob(new)[:BLOB_ABBREVIATION]} 100644\n")
    body = []
    for line in difflib.unified_diff(text_lines(old or b""), text_lines(new),
                                     "/dev/null" if old is None else f"a/{path}", f"b/{path}", n=3):
        body.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(header + body)


def upstream_change(base_tree: Path, version: str, files: list[str] | None, description: str) -> UpstreamChange:
    """The reference diff from the built base to upstream ``version``: of ``files``, or else of the changed files
    that ``description`` names. Raises ``UpstreamError`` saying what to do instead."""
    later = sdist_files(obtain_sdist(version), version)
    base = tree_files(base_tree)
    if files:
        lacking = [p for p in files if p not in later]
        if lacking:
            raise UpstreamError(f"vllm {version} has no file {', '.join(lacking)}")
        chosen = [p for p in files if base.get(p) != later[p]]
        unchanged = [p for p in files if p not in chosen]
        if not chosen:
            raise UpstreamError(f"vllm {version} does not change {', '.join(unchanged)}")
        proposed = False
    else:
        changed = changed_files(base, later)
        chosen = propose_files(changed, description)
        if not chosen:
            raise UpstreamError(f"{len(changed)} Python files under vllm/ change in vllm {version}, and the "
                                "description (--description) names none of them: name them with --files")
        proposed = True
    diff = "".join(file_diff(p, base.get(p), later[p]) for p in chosen)
    applies = subprocess.run(["git", "apply", "--check", "-"], cwd=base_tree, input=diff.encode(),
                             capture_output=True)
    if applies.returncode != 0:
        raise UpstreamError(f"upstream's change does not apply to the base: "
                            f"{applies.stderr.decode(errors='replace')[:400]}")
    return UpstreamChange(version, chosen, proposed, diff)
