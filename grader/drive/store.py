"""The results store: one JSON file per finished candidate, written atomically, so a killed run resumes.

Whatever a store file holds (another version's record, bytes that are not UTF-8, JSON of another shape) is a
miss, and the next save replaces it; a save that fails (disk full) is reported once and grading goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.core.identity import grading_identity
from grader.core.paths import CacheWriter, output_folder, page_name
from grader.core.records import Candidate, CandidateResult, RecordError
from grader.core.rubric import Task


def cache_key(candidate: Candidate, task: Task | None, gpu: bool, contained: bool, traced: bool = False) -> str:
    """Same key, same result: the grading's identity (task, rubric, base, environment, switches, schema and
    engine) and everything of the candidate that the result reports."""
    return grading_identity(task, gpu, contained, traced).key(
        "result", candidate.id, candidate.task, candidate.diff, candidate.reference_summary, candidate.source)


def is_final(result: CandidateResult) -> bool:
    """A complete grading that is not an error: the result a regrade would give again."""
    return result.run_status == "complete" and result.verdict != "error"


class ResultStore:
    """``reuse=False`` keeps results without answering from them (``--no-cache``: grade again, still resumable)."""

    def __init__(self, out: Path, reuse: bool = True) -> None:
        self.folder = output_folder(out / "store")
        self.reuse = reuse
        self.writer = CacheWriter("results store")

    def _path(self, candidate_id: str) -> Path:
        return self.folder / (page_name(candidate_id).removesuffix(".html") + ".json")

    def load(self, candidate_id: str, key: str) -> CandidateResult | None:
        """The stored result of ``candidate_id`` under ``key``; None for anything else found there."""
        if not self.reuse:
            return None
        try:
            record = json.loads(self._path(candidate_id).read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(record, dict) or record.get("key") != key:
            return None
        try:
            return CandidateResult.from_json(record.get("result"))
        except RecordError:
            return None

    def save(self, candidate_id: str, key: str, result: CandidateResult) -> bool:
        """Keep a finished result; only a complete grading is kept (a time-out, an interrupt, an environment
        fault or a grading error would be replayed as if it were the candidate's result)."""
        if not is_final(result):
            return False
        return self.writer.write(self._path(candidate_id), json.dumps({"key": key, "result": result.to_json()},
                                                                      sort_keys=True))
