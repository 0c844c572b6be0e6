"""``grade BUNDLE --labels FILE``: the scorecards show a judge's verdict beside the grader's, and bad labels are
refused with a one-line error before any grading."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Two candidates without a captured diff: graded (no_diff) without running any hidden test.
BUNDLE = ("https://github.com/vllm-project/vllm\n\nno diff captured (no int8-kv-rounding patch)\n\n"
          "no diff captured (no int8-kv-rounding patch)\n")


def grade(tmp_path: Path, labels: str) -> subprocess.CompletedProcess:
    (tmp_path / "pair.txt").write_text(BUNDLE)
    (tmp_path / "labels.json").write_text(labels)
    return subprocess.run([sys.executable, str(REPO / "grade.py"), str(tmp_path / "pair.txt"), "--gpu", "off",
                           "--out", str(tmp_path / "out"), "--labels", str(tmp_path / "labels.json")],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def test_the_index_shows_the_judges_verdict_and_whether_it_agrees(tmp_path):
    labels = {"entries": [{"bundle_position": 0, "overall": "no_diff"}, {"bundle_position": 1, "overall": "fail"}]}
    proc = grade(tmp_path, json.dumps(labels))
    assert proc.returncode == 0, proc.stderr
    verdicts = {c["source"].rsplit("#", 1)[1]: c["verdict"]
                for c in json.loads((tmp_path / "out" / "results.json").read_text())["candidates"]}
    assert verdicts == {"0": "no_diff", "1": "no_diff"}
    index = (tmp_path / "out" / "index.html").read_text()
    assert "judge agrees on 1 of 2" in index
    assert "\u2713 agrees" in index and "\u2717 differs" in index


def test_unreadable_labels_are_refused_before_grading(tmp_path):
    proc = grade(tmp_path, "{not json")
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot read --labels")
    assert not (tmp_path / "out" / "results.json").exists()
