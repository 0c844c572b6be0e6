"""Run a tool (git apply, GNU patch) over a candidate's tree as an unprivileged user that sees only that tree.

A diff is the candidate's input to those tools; a parser bug or a tool's own reading of a header (quoted names,
copy sources, modes) must not let it reach anything else. The tool runs in the same kind of sandbox as a
subject: its own uid (the tree is lent to it for the run and given back to root after), no network, the
repository, caches and scratch area covered, nothing of the grader's environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from grader.sandbox import contain

TOOL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null"}


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
    ``touched`` only those paths (and the folders they live in) are lent to the tool's uid."""
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
