"""Side inputs and copies: a malformed labels file is refused naming the file, the entry and the field (never a
traceback); a merge's pages are copied whole or not at all."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import SEED, needs_seed
from grader.pipeline.labels import LabelsError, read_labels
from grader.core import paths
from grader.core.paths import atomic_copy, page_name
from grader.drive.merge import copy_pages

REPO = Path(__file__).resolve().parents[2]
GOOD = {"c1": 1, "c2": 0.5, "overall": "partial", "task": "int8-kv-rounding", "bundle_position": 0}


def labels_file(tmp_path: Path, entries: list, criteria: object = None) -> Path:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"entries": entries, "criteria": criteria if criteria is not None else {}}))
    return path


@pytest.mark.parametrize("entry,field", [
    ({k: v for k, v in GOOD.items() if k != "bundle_position"}, "bundle_position"),
    (dict(GOOD, bundle_position="3"), "bundle_position"),
    (dict(GOOD, bundle_position=-1), "bundle_position"),
    (dict(GOOD, overall=1), "overall"),
    (dict(GOOD, task=["t"]), "task"),
    (dict(GOOD, c3="met"), "c3"),
])
def test_a_labels_entry_missing_or_wrong_in_a_field_is_named(tmp_path, entry, field):
    path = labels_file(tmp_path, [GOOD | {"bundle_position": 7}, entry])
    with pytest.raises(LabelsError) as caught:
        read_labels(path)
    assert str(path) in str(caught.value) and "entry 1" in str(caught.value) and repr(field) in str(caught.value)


def test_labels_that_are_not_labels_are_named(tmp_path):
    for text in ("[]", "{not json", json.dumps({"entries": {}}), json.dumps({"entries": [], "criteria": []})):
        (tmp_path / "l.json").write_text(text)
        with pytest.raises(LabelsError, match=str(tmp_path / "l.json")):
            read_labels(tmp_path / "l.json")
    assert read_labels(labels_file(tmp_path, [GOOD]))["entries"] == [GOOD]


@needs_seed
def test_the_seed_labels_are_read():
    seed = SEED / "judge-labels.json"
    assert len(read_labels(seed)["entries"]) == len(json.loads(seed.read_text())["entries"])


def test_calibrate_with_an_entry_lacking_its_position_exits_2_naming_it(tmp_path):
    path = labels_file(tmp_path, [{k: v for k, v in GOOD.items() if k != "bundle_position"}])
    results = tmp_path / "results.json"
    results.write_text("{}")
    done = subprocess.run([sys.executable, "grade.py", "calibrate", "--labels", str(path), "--results", str(results),
                           str(tmp_path / "b.txt"), "--out", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert f"{path}: entry 0 lacks the field 'bundle_position'" in done.stderr


class FillingFile:
    """A file on a disk that fills after half of what is written to it."""

    def __init__(self, handle):
        self.real = open(handle, "wb")

    def write(self, data):
        self.real.write(data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.real.close()


def test_a_page_copied_into_a_filling_output_is_whole_or_absent(tmp_path, monkeypatch):
    source_out, dest = tmp_path / "shard1", tmp_path / "merged"
    (source_out / "candidates").mkdir(parents=True)
    page = source_out / "candidates" / page_name("cand")
    page.write_text("<html>" + "x" * 10000 + "</html>")
    (dest / "candidates").mkdir(parents=True)
    (dest / "candidates" / page_name("cand")).write_text("<html>earlier whole page</html>")
    monkeypatch.setattr(paths, "open", lambda handle, mode: FillingFile(handle), raising=False)
    merged = SimpleNamespace(results=[SimpleNamespace(id="cand")], origin={"cand": source_out})
    with pytest.raises(OSError):
        copy_pages(merged, dest)
    assert [p.name for p in (dest / "candidates").iterdir()] == [page_name("cand")]
    assert (dest / "candidates" / page_name("cand")).read_text() == "<html>earlier whole page</html>"
    monkeypatch.undo()
    atomic_copy(page, dest / "candidates" / page_name("cand"))
    assert (dest / "candidates" / page_name("cand")).read_bytes() == page.read_bytes()


def test_a_failure_in_the_launchers_cleanup_costs_no_result(monkeypatch, capsys):
    from grader.core.records import Candidate, GradingOptions
    from grader.drive.many_candidates import grade_many
    from grader.sandbox.launch import ColdLauncher

    def failing_close(self):
        raise OSError(errno.EBUSY, "Device or resource busy", "/dev/shm/worker-home")

    monkeypatch.setattr(ColdLauncher, "close", failing_close)
    candidates = [Candidate("unreadable", "x.diff", "", ingest_error="cannot read x.diff: a FIFO")]
    run = grade_many(candidates, GradingOptions(use_evidence_cache=False))
    assert [r.id for r in run.results] == ["unreadable"]
    assert "cleaning up the judges' workers failed" in capsys.readouterr().err
