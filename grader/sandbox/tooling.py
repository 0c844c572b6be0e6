"""Run a tool (git apply, GNU patch) over a candidate's tree as an unprivileged user that sees only that tree.

A diff is the candidate's input to those tools; a parser bug or a tool's own reading of a header (quoted names,
copy sources, modes) must not let it reach anything else. The tool runs in the same kind of sandbox as a
subject: its own uid (the tree is lent to it for the run and given back to root after), no network, the
repository, caches and scratch area covered, nothing of the grader's environment.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from grader.sandbox import contain

TOOL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null"}


# The programs the grader runs, and how to get each where it is missing.
TOOLS = {"git": "install git (e.g. apt-get install git)",
         "cp": "install GNU coreutils (e.g. apt-get install coreutils)",
         "patch": "install GNU patch (e.g. apt-get install patch)"}
# Without these nothing can be graded; without the others only some candidates can.
REQUIRED_TOOLS = ("git", "cp")


class ToolMissing(Exception):
    """A program the grader needs is not installed: the environment's state, never a candidate's failure."""


def os_error_line(exc: OSError) -> str:
    """An OSError a user can cause (a full disk, a read-only or forbidden folder), as one line: the cause and the
    path, e.g. "no space left on device at /out/results.json"."""
    cause = (exc.strerror or str(exc)).lower()
    return f"{cause} at {exc.filename}" if exc.filename else cause


def failed_copy_error(stderr: str, destination: Path) -> OSError:
    """The OSError behind a failed ``cp``, read from its message (cp names the errno's text), with the
    destination as the path."""
    for number in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO):
        if os.strerror(number).lower() in stderr.lower():
            return OSError(number, os.strerror(number), str(destination))
    return OSError(errno.EIO, f"copy failed: {stderr.strip()[-300:]}", str(destination))


def find_tool(name: str) -> str:
    """The absolute path of ``name`` on the grader's PATH (resolved: a sandbox sees only real paths)."""
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"{name} is not installed here (not on PATH): {TOOLS.get(name, 'install it')}")
    return os.path.realpath(found)


def missing_tools() -> dict[str, str]:
    """Each tool of ``TOOLS`` that is not found, with the sentence saying so."""
    missing = {}
    for name in TOOLS:
        try:
            find_tool(name)
        except ToolMissing as exc:
            missing[name] = str(exc)
    return missing


def lent_paths(tree: Path, touched: list[str]) -> list[Path]:
    """What a tool must be able to write to change ``touched`` (relative paths): each existing file, and the
    nearest existing folder above each path (where it creates, renames or removes files)."""
    lent: dict[Path, None] = {}
    for rel in touched:
        target = tree / rel
        if target.is_file() and not target.is_symlink():
            lent[target] = None
        folder = target.parent
        while not folder.is_dir() and folder != tree:
            folder = folder.parent
        if folder.resolve().is_relative_to(tree.resolve()):
            lent[folder] = None
    return list(lent)


def run_tool(argv: list[str], tree: Path, stdin_text: str, hidden: list[Path], timeout: float = 120,
             contained: bool = True, touched: list[str] | None = None) -> tuple[int | None, str]:
    """Run ``argv`` in ``tree`` with ``stdin_text``; (exit code or None on time-out, combined output). With
    ``touched`` only those paths (and the folders they live in) are lent to the tool's uid. Raises
    ``ToolMissing`` when the tool is not installed."""
    argv = [find_tool(argv[0]), *argv[1:]]
    if not contained:
        return _run(argv, tree, stdin_text, dict(TOOL_ENV, HOME=str(tree)), timeout, None)
    home = Path(tempfile.mkdtemp(prefix="tool-", dir=tree.parent))
    lent = lent_paths(tree, touched) if touched is not None else None
    box = contain.prepare(home / "home", writable=[tree], lend=lent, hidden=hidden, cpu_s=int(timeout) + 5,
                          max_tasks=64)
    try:
        return _run(box.argv(argv), tree, stdin_text, dict(TOOL_ENV, HOME=str(home / "home")), timeout, box)
    finally:
        box.cleanup()
        contain.give_back(tree, lent)
        shutil.rmtree(home, ignore_errors=True)


def _run(argv, tree, stdin_text, env, timeout, box) -> tuple[int | None, str]:
    # A diff's bytes that are not UTF-8 were read with surrogateescape: the tool gets exactly those bytes back.
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="surrogateescape",
                            start_new_session=True)
    try:
        out, _ = proc.communicate(stdin_text, timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        if box is not None:
            box.cleanup(proc.pid)
        else:
            os.killpg(proc.pid, 9)
        proc.communicate()
        return None, f"error: {argv[-1] if argv else 'tool'} timed out after {timeout:.0f} s"
