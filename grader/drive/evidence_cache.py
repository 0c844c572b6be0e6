"""Evidence cache: hidden-test evidence keyed by the applied tree's content, so identical trees run once.

The key is git's hash of the whole applied tree (``ApplyReport.tree_id``), never the paths a parser read from
the diff: two candidates share evidence only when every file of their trees is the same (the common case for
cut previews, where nothing but test files survive). Deterministic hidden tests make reuse sound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from grader.core.identity import Identity
from grader.core.paths import CacheWriter, cache_dir
from grader.core.records import AppliedEntry, ApplyReport, RecordError, RunReport

Entry = TypeVar("Entry", RunReport, AppliedEntry)


def tree_key(identity: Identity, apply: ApplyReport) -> str | None:
    """Identity of the evidence: the grading's identity (task, rubric, base, environment, switches, schema and
    engine) and the applied tree's content; None (do not cache) when the tree has no identity."""
    return identity.key("evidence", apply.tree_id) if apply.tree_id else None


def diff_key(identity: Identity, diff: str) -> str:
    """A key that is safe without building a tree: the same diff bytes under the same identity apply to the same
    tree. It only points at a tree key's evidence (``save_applied``); the tree key stays the source of truth
    whenever a tree is built."""
    return identity.key("applied diff", diff)


def _is_reproducible(run: RunReport) -> bool:
    """Evidence a rerun would reproduce: no time-outs, no check failed on time (``timeout: ...``, a candidate
    over its budget: its verdict stands, but one slow moment of the machine is not replayed to every later
    grading of the same tree), no faults of the environment or the grader."""
    return not (run.timed_out or run.environment_error or run.grader_error
                or any(o.status in ("timeout", "not_run") or o.message.startswith("timeout:")
                       for o in run.outcomes))


class EvidenceCache:
    """Entries of another version, shape or encoding are misses (a rerun replaces them); a write that fails (disk
    full) is reported once and the grading goes on with the evidence it has."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or cache_dir() / "evidence"
        self.writer = CacheWriter("evidence cache")

    def _read(self, key: str, record: type[Entry]) -> Entry | None:
        try:
            return record.from_json(json.loads((self.folder / f"{key}.json").read_bytes().decode("utf-8")))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecordError):
            return None

    def load(self, key: str) -> RunReport | None:
        return self._read(key, RunReport)

    def save(self, key: str, run: RunReport) -> None:
        """Keep only evidence that a rerun would reproduce."""
        if _is_reproducible(run):
            self.writer.write(self.folder / f"{key}.json", json.dumps(run.to_json()))

    def load_applied(self, key: str) -> tuple[ApplyReport, RunReport] | None:
        """What a diff applied to and the evidence of that tree, found without building it (``diff_key``)."""
        entry = self._read(key, AppliedEntry)
        run = self.load(entry.tree_key) if entry is not None else None
        return (entry.apply, run) if run is not None else None

    def save_applied(self, key: str, apply: ApplyReport, tree_key: str, run: RunReport) -> None:
        if _is_reproducible(run):
            self.writer.write(self.folder / f"{key}.json", json.dumps(AppliedEntry(apply, tree_key).to_json()))
