"""Shared fixtures: where the seed lives, a tiny git tree to apply diffs to, and a run section to write reports with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from grader.core.records import GraderRevision, RunInfo

SHARED = Path(__file__).resolve().parents[2] / "shared"
SEED = SHARED / "seed"
# The seed is data from outside the project, beside the checkout; a clone elsewhere has none to read.
needs_seed = pytest.mark.skipif(not (SEED / "graded-candidates.txt").is_file(),
                                reason="the seed bundle (../shared/seed) is not beside this checkout")


def run_info(**changes) -> RunInfo:
    """A complete run section (a graded, unmerged run with no clock), with ``changes`` over it."""
    fields = dict(grader_version="x", grader=GraderRevision("x", "abc", False), started_at="2026-12-01T21:00:00+00:00",
                  gpu="off", candidates=1, containment="on", containment_degraded=False, containment_warning=None,
                  timeout_s=600.0, fail_under=None, exit_code=0, exit_reason="0: graded", timings={"wall_s": 1.0},
                  backend="local", jobs=1)
    return RunInfo(**(fields | changes))


def lines_file(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


@pytest.fixture
def make_git_tree(tmp_path):
    """Factory: a fresh directory with the given {relative path: text} files, committed in a git repository of its
    own (what a tree made from a base looks like: its HEAD is the unpatched state)."""

    def make(files: dict[str, str], name: str = "tree") -> Path:
        root = tmp_path / name
        root.mkdir()
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode())
        subprocess.run(["git", "init", "-q", str(root)], check=True, capture_output=True)
        commit = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                  "--allow-empty", "-m", "base"]
        subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, capture_output=True)
        subprocess.run(commit, check=True, capture_output=True)
        return root

    return make


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """$GRADER_CACHE with the shared cache's bases and sdists but an evidence cache of this test's own."""
    from grader.core.paths import cache_dir

    shared = cache_dir()
    private = tmp_path / "cache"
    private.mkdir()
    for entry in shared.iterdir() if shared.is_dir() else []:
        if entry.name != "evidence":
            os.symlink(entry, private / entry.name)
    monkeypatch.setenv("GRADER_CACHE", str(private))
    return private


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A GRADER_CACHE of the test's own (judge secret, compiled modules, records), not the machine's."""
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
