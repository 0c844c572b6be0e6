"""Honest inputs and exits through the real command line, on real candidates (slow: minutes).

- One run holding a reference fix on CPU, a failing sample, a time-out and a cut preview writes a JUnit file that
  junitparser reads as: no failure for the reference, the failing sample's verdict a failure, skips for the
  time-out and the cut preview, measured (non-zero) times, also for evidence served from the cache.
- A whole diff whose hunk ends early, or with a GIT binary section, is never ``full``: the tree graded is not
  the one git builds from it, and the summary says so first.
- A cut preview that shows every file the criteria read is graded, and still ``input_truncated``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grader.pipeline.labels import bundle_ids
from grader.core.rubric import REPO_ROOT

pytestmark = pytest.mark.slow
REFERENCES = REPO_ROOT / "reference_impl"
BUNDLE_HEAD = "https://github.com/vllm-project/vllm\n\n"


def grade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "grade.py"), *args, "--jobs", "1", "--gpu", "off"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800)


def bundle(path: Path, *diffs: str) -> Path:
    """A bundle file of ``diffs``, each with a verdict paragraph."""
    path.write_text(BUNDLE_HEAD + "".join(f"A candidate fix, verdict unknown.\n\n{d.rstrip()}\n\n" for d in diffs))
    return path


def results(out: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads((out / "results.json").read_text())["candidates"]}


def new_file(path: str, line: str) -> str:
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1 @@\n+{line}\n")


def test_one_run_of_every_kind_writes_junit_that_agrees_with_the_exit_code(tmp_path):
    from junitparser import Failure, JUnitXml, Skipped

    inputs = tmp_path / "in"
    (inputs / "fp8-moe-lora").mkdir(parents=True)
    (inputs / "int8-kv-rounding").mkdir()
    (inputs / "fp8-moe-lora" / "reference.diff").write_text((REFERENCES / "fp8-moe-lora.diff").read_text())
    (inputs / "fp8-moe-lora" / "early-exit-only.diff").write_text(
        (REPO_ROOT / "candidates" / "fp8-moe-lora" / "early-exit-only.diff").read_text())
    # A tree no earlier run graded (a new file of its own), so no cached evidence answers before the time limit.
    (inputs / "int8-kv-rounding" / "round-no-clamp.diff").write_text(
        new_file(f"docs/run-{uuid.uuid4().hex}.md", "a tree of its own")
        + (REPO_ROOT / "candidates" / "int8-kv-rounding" / "round-no-clamp.diff").read_text())
    cut = "\n".join((REFERENCES / "fp8-moe-lora.diff").read_text().splitlines()[:30]) + "\n"
    preview = bundle(tmp_path / "preview.txt", cut)
    # The reference and the failing sample graded once in full: in the run below their evidence is cached.
    warm = grade(str(inputs / "fp8-moe-lora"), "--out", str(tmp_path / "warm"))
    assert warm.returncode == 1, warm.stderr[-3000:]  # 1: the failing sample is a fail

    junit = tmp_path / "junit.xml"
    done = grade(str(inputs), str(preview), "--timeout", "3", "--fail-under", "0.9", "--out", str(tmp_path / "out"),
                 "--junit", str(junit))
    by_id = results(tmp_path / "out")
    cut_id = bundle_ids(preview)[0]
    assert by_id["int8-kv-rounding/round-no-clamp"]["run_status"] == "timed_out", done.stderr[-3000:]
    assert by_id[cut_id]["verdict"] == "input_truncated"
    assert done.returncode == 1, done.stderr[-3000:]
    assert "exit 1: 1 candidate(s) below --fail-under 0.9: fp8-moe-lora/early-exit-only" in done.stderr

    cases: dict[tuple[str, str], object] = {}
    suites = list(JUnitXml.fromfile(str(junit)))
    assert {s.name for s in suites} == {"fp8-moe-lora", "int8-kv-rounding"}
    for suite in suites:
        assert suite.timestamp and suite.time > 0
        cases.update({(case.classname, case.name): case for case in suite})
    assert not any("/" in cls or cls.startswith(("fp8-moe-lora.", "int8-kv-rounding.")) for cls, _ in cases)

    def results_of(cls: str) -> dict[str, list]:
        return {name: [type(r) for r in case.result] for (c, name), case in cases.items() if c == cls}

    reference = results_of("reference")
    assert all(Failure not in kinds for kinds in reference.values()), reference
    assert reference["verdict"] == []
    assert all(cases[("reference", n)].time > 0 for n in reference if n != "verdict" and not reference[n])
    failing = results_of("early-exit-only")
    assert failing["verdict"] == [Failure]
    for cls in ("round-no-clamp", cut_id):
        skipped = results_of(cls)
        assert skipped["verdict"] == [Skipped], (cls, skipped)
        assert all(kinds in ([Skipped], []) for kinds in skipped.values()), (cls, skipped)
    # A <skipped> carries its reason as text (the Jenkins schema gives it no attribute).
    assert cases[("round-no-clamp", "verdict")].result[0].text.startswith("timed out")
    assert cases[(cut_id, "verdict")].result[0].text.startswith("input cut off")
    assert all(cases[(cut_id, n)].result[0].text.startswith("input cut off")
               for n in results_of(cut_id) if n != "verdict")
    failures = {cls for (cls, _), case in cases.items() if any(isinstance(r, Failure) for r in case.result)}
    assert failures == {"early-exit-only"}


@pytest.fixture(scope="module")
def xpu_whole_diffs(tmp_path_factory):
    """The xpu-kv-cache-dtypes reference (``full`` on CPU) alone, with a hunk that ends early, with a GIT binary
    section, and as a bundle preview cut after every file the criteria read."""
    folder = tmp_path_factory.mktemp("whole")
    inputs = folder / "in"
    inputs.mkdir()
    reference = (REFERENCES / "xpu-kv-cache-dtypes.diff").read_text()
    (inputs / "reference.diff").write_text(reference)
    cut_hunk = new_file("vllm_notes/readme.md", "notes").replace("@@ -0,0 +1 @@", "@@ -0,0 +1,3 @@")
    (inputs / "ends-early.diff").write_text(reference + cut_hunk)
    binary = ("diff --git a/docs/plot.png b/docs/plot.png\nnew file mode 100644\nindex 0000000..e69de29\n"
              "GIT binary patch\nliteral 3\nKcmZ?wWB>pF01E&C\n\nliteral 0\nHcmV?d00001\n\n")
    (inputs / "binary.diff").write_text(binary + reference)
    preview = bundle(folder / "preview.txt", reference + cut_hunk)
    done = grade(str(inputs), str(preview), "--task", "xpu-kv-cache-dtypes", "--out", str(folder / "out"))
    return done, results(folder / "out")


def test_a_whole_diff_that_git_would_refuse_or_build_otherwise_is_never_full(xpu_whole_diffs):
    done, by_id = xpu_whole_diffs
    assert by_id["reference"]["verdict"] == "full", by_id["reference"]["summary"]
    for cid, said in (("ends-early", "end early"), ("binary", "binary changes were not applied")):
        result = by_id[cid]
        assert result["verdict"] == "partial" and result["run_status"] == "apply_partial", result["summary"]
        assert result["summary"].startswith("Applied only in part:") and said in result["summary"].split(". ")[0]


def test_a_preview_cut_after_the_files_the_criteria_read_is_graded_and_input_truncated(xpu_whole_diffs):
    done, by_id = xpu_whole_diffs
    [result] = [r for r in by_id.values() if r["source"].endswith("preview.txt#0")]
    assert (result["verdict"], result["run_status"]) == ("input_truncated", "input_truncated"), result["summary"]
    assert all(c["status"] == "met" for c in result["criteria"].values()), result["summary"]
    assert result["summary"].startswith("The input was cut off"), result["summary"]
    assert done.returncode == 3 and "exit 3: 1 candidate(s) not graded completely (input cut off)" in done.stderr
