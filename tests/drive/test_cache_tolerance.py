"""Caches tolerate what they find: an entry of another version, shape or encoding is a miss and is replaced,
never an error; a write that fails (disk full) warns once and grading goes on, leaving no temporary file."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from grader.core import paths
from grader.core.records import ApplyReport, CandidateResult, RunReport, TestOutcome
from grader.drive.evidence_cache import EvidenceCache
from grader.pipeline.ingest import ingest
from grader.core.records import GradingOptions
from grader.drive.many_candidates import grade_many
from grader.drive.store import ResultStore

SAMPLE = Path(__file__).resolve().parents[2] / "candidates" / "int8-kv-rounding" / "plus-half-truncate.diff"

RESULT = {"id": "a", "task": None, "source": "a.diff", "verdict": "no_diff", "score": None, "criteria": {},
          "apply": None, "summary": "", "run_status": "complete"}
RUN = RunReport([TestOutcome("t::x", "passed", {"c1": 1.0})], 0, False, "log", 1.5)
# What entries of other versions, shapes and encodings look like.
FOUND = {
    "not UTF-8": b"\xff\xfe\x00garbage",
    "a list": b"[]",
    "not JSON": b'{"key": ',
    "an unknown field": None,  # filled in per cache
    "a field of another type": None,
}


def store_entries(key: str) -> dict[str, bytes]:
    entries = dict(FOUND)
    entries["an unknown field"] = json.dumps({"key": key, "result": {**RESULT, "exit_status": 3}}).encode()
    entries["a field of another type"] = json.dumps({"key": key, "result": {**RESULT, "criteria": []}}).encode()
    entries["a result that is a list"] = json.dumps({"key": key, "result": []}).encode()
    return entries


def evidence_entries() -> dict[str, bytes]:
    entries = dict(FOUND)
    entries["an unknown field"] = json.dumps({**RUN.to_json(), "signal": 9}).encode()  # another grader version
    entries["a field of another type"] = json.dumps({**RUN.to_json(), "outcomes": {"t": "passed"}}).encode()
    return entries


@pytest.mark.parametrize("found", list(store_entries("k")))
def test_a_store_entry_of_another_shape_is_a_miss_and_is_replaced(tmp_path, found):
    store = ResultStore(tmp_path)
    store._path("a").write_bytes(store_entries("k")[found])
    assert store.load("a", "k") is None
    assert store.save("a", "k", CandidateResult.from_json(RESULT))
    assert store.load("a", "k").verdict == "no_diff"


@pytest.mark.parametrize("found", list(evidence_entries()))
def test_an_evidence_entry_of_another_shape_is_a_miss_and_is_replaced(tmp_path, found):
    cache = EvidenceCache(tmp_path)
    (tmp_path / "k.json").write_bytes(evidence_entries()[found])
    (tmp_path / "d.json").write_bytes(evidence_entries()[found])
    assert cache.load("k") is None and cache.load_applied("d") is None
    cache.save("k", RUN)
    cache.save_applied("d", ApplyReport("applied", tree_id="t"), "k", RUN)
    assert cache.load("k") == RUN
    assert cache.load_applied("d") == (ApplyReport("applied", tree_id="t"), RUN)


def test_an_applied_entry_pointing_at_a_bad_tree_entry_is_a_miss(tmp_path):
    cache = EvidenceCache(tmp_path)
    (tmp_path / "d.json").write_text(json.dumps({"apply": {"status": "applied"}, "tree_key": "k"}))
    (tmp_path / "k.json").write_text(json.dumps({"outcomes": "none"}))
    assert cache.load_applied("d") is None


class FullDisk:
    """A file whose writes fail as on a full disk."""

    def __init__(self, real):
        self.real = real

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.real.close()

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        # Everything but writing works as on any disk: a lock file already open is locked (``cache_lock``).
        return getattr(self.real, name)


@pytest.fixture
def disk_full(monkeypatch):
    monkeypatch.setattr(paths, "open", lambda *a, **k: FullDisk(open(*a, **k)), raising=False)


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*") if p.is_file()]


def test_a_full_disk_warns_once_per_cache_and_leaves_no_temporary_file(tmp_path, disk_full, capsys):
    store, evidence = ResultStore(tmp_path / "out"), EvidenceCache(tmp_path / "evidence")
    assert not store.save("a", "k", CandidateResult.from_json(RESULT)) and \
        not store.save("b", "k", CandidateResult.from_json({**RESULT, "id": "b"}))
    evidence.save("k", RUN)
    evidence.save_applied("d", ApplyReport("applied", tree_id="t"), "k", RUN)
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2 and all("No space left on device" in w for w in warnings)
    assert "results store" in warnings[0] and "evidence cache" in warnings[1]
    assert leftovers(tmp_path) == []
    assert store.load("a", "k") is None and evidence.load("k") is None


def test_atomic_write_removes_its_temporary_file_when_the_write_fails(tmp_path, disk_full):
    with pytest.raises(OSError, match="No space"):
        paths.atomic_write(tmp_path / "f.json", "{}")
    assert list(tmp_path.iterdir()) == []


def grade(out: Path):
    [candidate] = ingest([SAMPLE])
    [graded] = grade_many([candidate], GradingOptions(timeout=300, cold=True), store=ResultStore(out)).graded
    return graded


@pytest.mark.slow
def test_grading_goes_on_through_a_full_disk_and_another_versions_evidence(tmp_path, private_cache, monkeypatch,
                                                                           capsys):
    truth = grade(tmp_path / "truth").result.to_json()
    assert truth["run_status"] == "complete" and truth["verdict"] != "error"
    evidence = private_cache / "evidence"
    entries = sorted(evidence.glob("*.json"))
    assert entries
    # Entries as another grader version wrote them: the same key, one field more.
    for entry in entries:
        entry.write_text(json.dumps({**json.loads(entry.read_text()), "written_by": "another version"}))
    regraded = grade(tmp_path / "other-version").result.to_json()
    assert (regraded["verdict"], regraded["score"]) == (truth["verdict"], truth["score"])
    assert "evidence_cached" not in regraded["timings"]
    assert all("written_by" not in entry.read_text() for entry in entries)  # replaced
    with monkeypatch.context() as patched:
        patched.setattr(paths, "open", lambda *a, **k: FullDisk(open(*a, **k)), raising=False)
        capsys.readouterr()
        for entry in entries:
            entry.unlink()
        full = grade(tmp_path / "full").result.to_json()
    assert (full["verdict"], full["score"], full["run_status"]) == (truth["verdict"], truth["score"], "complete")
    assert "No space left on device" in capsys.readouterr().err
    assert leftovers(tmp_path / "full") == [] and leftovers(evidence) == []
