"""The results store: one JSON file per finished candidate, written atomically, so a killed run resumes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grader import __version__
from grader.checkout import recipe_key
from grader.core.records import Candidate
from grader.report import atomic_write, output_folder, page_name
from grader.core.rubric import Task, environment_fingerprint, rubric_fingerprint


def cache_key(candidate: Candidate, task: Task | None, gpu: bool) -> str:
    """Same key, same result: task, diff, rubric version and files, base, GPU evidence and grader version."""
    parts = [__version__, environment_fingerprint(), candidate.id, candidate.task or "", candidate.diff, str(gpu),
             candidate.reference_summary or "", candidate.source]
    if task is not None:
        parts += [str(task.version), rubric_fingerprint(task), recipe_key(task.base)]
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "replace")).hexdigest()


class ResultStore:
    """``reuse=False`` keeps results without answering from them (``--no-cache``: grade again, still resumable)."""

    def __init__(self, out: Path, reuse: bool = True) -> None:
        self.folder = output_folder(out / "store")
        self.reuse = reuse

    def _path(self, candidate_id: str) -> Path:
        return self.folder / page_name(candidate_id).replace(".html", ".json")

    def load(self, candidate_id: str, key: str) -> dict | None:
        if not self.reuse:
            return None
        path = self._path(candidate_id)
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return record["result"] if record.get("key") == key else None

    def save(self, candidate_id: str, key: str, result: dict) -> bool:
        """Keep a finished result; only a complete grading is kept (a time-out, an interrupt, an environment
        fault or a grading error would be replayed as if it were the candidate's result)."""
        if result.get("run_status") != "complete" or result.get("verdict") == "error":
            return False
        atomic_write(self._path(candidate_id), json.dumps({"key": key, "result": result}, sort_keys=True))
        return True
