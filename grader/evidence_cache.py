"""Evidence cache: hidden-test evidence keyed by what the tests can see, so identical trees run once.

Two candidates whose diffs leave the same files with the same bytes (the common case for cut previews, where
nothing but test files survive) give the same evidence; deterministic hidden tests make reuse sound.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from grader.checkout import BuiltBase, cache_dir
from grader.records import ApplyReport, RunReport, TestOutcome
from grader.report import atomic_write
from grader.rubric import Task, environment_fingerprint, rubric_fingerprint


def tree_key(task: Task, base: BuiltBase, tree: Path, apply: ApplyReport, gpu: bool) -> str:
    """Identity of the patched tree as the hidden tests see it: base, and the bytes of every file the diff touched."""
    digest = hashlib.sha256("\x00".join([task.id, rubric_fingerprint(task), base.key, str(gpu),
                                         environment_fingerprint()]).encode())
    for path in sorted({f.path for f in apply.files}):
        target = tree / path
        digest.update(path.encode() + b"\x00")
        digest.update(hashlib.sha256(target.read_bytes()).digest() if target.is_file() else b"absent")
    return digest.hexdigest()


class EvidenceCache:
    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or cache_dir() / "evidence"

    def load(self, key: str) -> RunReport | None:
        try:
            data = json.loads((self.folder / f"{key}.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None
        data["outcomes"] = [TestOutcome(**o) for o in data["outcomes"]]
        return RunReport(**data)

    def save(self, key: str, run: RunReport) -> None:
        """Keep only evidence that a rerun would reproduce: no time-outs, no environment failures."""
        if run.timed_out or run.environment_error:
            return
        atomic_write(self.folder / f"{key}.json", json.dumps(asdict(run)))
