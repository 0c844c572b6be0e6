"""The results store: one JSON file per finished candidate, written atomically, so a killed run resumes."""

from __future__ import annotations

import json
from pathlib import Path

from grader.core.identity import grading_identity
from grader.core.records import Candidate
from grader.report import atomic_write, output_folder, page_name
from grader.core.rubric import Task


def cache_key(candidate: Candidate, task: Task | None, gpu: bool, contained: bool) -> str:
    """Same key, same result: the grading's identity (task, rubric, base, environment, switches, schema and
    engine) and everything of the candidate that the result reports."""
    return grading_identity(task, gpu, contained).key(
        "result", candidate.id, candidate.task, candidate.diff, candidate.reference_summary, candidate.source)


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
