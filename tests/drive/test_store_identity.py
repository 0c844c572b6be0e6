"""Every distinct candidate keeps its own store file and its own entry in results.json (issue 49 leftovers): ids
that clean, truncate, case-fold or normalise to the same readable name, and ids holding control characters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.pipeline.ingest import ingest
from grader.drive.store import ResultStore

REPO = Path(__file__).resolve().parents[2]
# 32 names of the collision classes: case, characters a file name cannot hold (and their escapes written out),
# Unicode normal forms and look-alikes, a leading dot, a taken ``~2`` suffix, long names alike up to the cut.
NAMES = ["a", "A", "a~2", "a\x1b", "a\\x1b", "a b", "a_b", "a\tb", "a\nb", "\u00e9", "e\u0301", "\u00c9",
         ".a", "..a", "a.", "\u200ba", "a\u200b", "\uff41", "a\\u200b", "\u202ea", "a\r", "a\\r", "a\x7f", "a\\x7f",
         "a%", "b\xa0", "b ", "b\\xa0", "x" * 240 + "1", "x" * 240 + "2", "x" * 240, "\x01"]


def test_thirty_two_distinct_candidates_keep_thirty_two_store_files(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in NAMES:
        (folder / f"{name}.diff").write_text("diff --git a/x b/x\n")
    assert len(os.listdir(folder)) == len(NAMES) == 32
    candidates = ingest([folder], task="int8-kv-rounding")
    store = ResultStore(tmp_path / "out")
    paths = {store._path(c.id) for c in candidates}
    assert len({c.id for c in candidates}) == 32 and len(paths) == 32
    # On a case-insensitive or normalising file system the names must still differ.
    assert len({p.name.casefold() for p in paths}) == 32
    assert all(len(p.name.encode()) <= 255 for p in paths)


@pytest.mark.slow
def test_ids_with_control_characters_reach_results_json(tmp_path):
    folder = tmp_path / "in" / "int8-kv-rounding"
    folder.mkdir(parents=True)
    names = ["a\x1bb", "a\\x1bb", "c\td", "e\x7f", "\x01", "plain"]
    for name in names:  # not applicable: graded fast, each a verdict of its own
        (folder / f"{name}.diff").write_text("diff --git a/README.md b/README.md\n--- a/README.md\n"
                                             "+++ b/README.md\n@@ -1,1 +1,1 @@\n-zzz\n+yyy\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "grade.py"), str(tmp_path / "in"), "--out", str(out),
                           "--jobs", "1", "--gpu", "off"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    ids = [c["id"] for c in json.loads((out / "results.json").read_text())["candidates"]]
    assert len(ids) == len(set(ids)) == len(names), ids
    assert len(list((out / "store").glob("*.json"))) == len(names)
