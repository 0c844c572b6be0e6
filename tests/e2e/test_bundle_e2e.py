"""The seed bundle end to end through the command line, for the tasks whose evidence is complete on CPU:
every entry gets a verdict, cut previews are input_truncated and say so, and the apply report is precise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.pipeline.ingest import parse_bundle
from grader.core.rubric import REPO_ROOT

SEED = Path(__file__).resolve().parents[3] / "shared" / "seed"
CPU_TASKS = ("xpu-kv-cache-dtypes", "vit-fp8-blackwell", "int8-kv-rounding", "rocm-mx-emulation")
BUNDLE = SEED / "graded-candidates.txt"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not BUNDLE.is_file(), reason=f"the seed bundle is not at {BUNDLE}")]


def _sub_bundle(path: Path) -> list[str]:
    """Write the bundle's entries of CPU_TASKS (kept whole, verdict paragraph and diff) to ``path``."""
    entries = [c for c in parse_bundle(BUNDLE) if c.task in CPU_TASKS]
    lines = [BUNDLE.read_text().splitlines()[0], ""]
    for c in entries:
        lines += [c.reference_summary, "", c.diff.rstrip("\n"), ""]
    path.write_text("\n".join(lines) + "\n")
    return [c.diff for c in entries]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    work = tmp_path_factory.mktemp("bundle")
    bundle = work / "seed-cpu.txt"
    diffs = _sub_bundle(bundle)
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "grade.py"), str(bundle), "--out", str(work / "out"),
                           "--gpu", "off", "--jobs", "2", "--junit", str(work / "out" / "junit.xml")],
                          capture_output=True, text=True, env=dict(os.environ), timeout=3000)
    results = json.loads((work / "out" / "results.json").read_text())["candidates"]
    return proc, results, diffs, work


def test_every_entry_gets_a_verdict(graded):
    proc, results, diffs, work = graded
    # Cut previews are not graded completely: exit 3, and the reason says so.
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "not graded completely (input cut off)" in proc.stderr
    assert len(results) == len(diffs) > 40
    assert {r["task"] for r in results} == set(CPU_TASKS)
    known = ("full", "partial", "fail", "input_truncated")
    assert all(r["verdict"] in known for r in results), [
        (r["id"], r["verdict"], r.get("error")) for r in results if r["verdict"] not in known]
    assert all(set(r["criteria"]) == {"c1", "c2", "c3", "c4", "c5"} for r in results)
    assert (work / "out" / "index.html").is_file() and (work / "out" / "junit.xml").is_file()


def test_cut_previews_are_input_truncated_never_fail_and_say_so_first(graded):
    _, results, _, _ = graded
    cut = [r for r in results if r["apply"]["truncated"]]
    assert cut, "the seed has cut previews for these tasks"
    for r in cut:
        assert (r["verdict"], r["run_status"]) == ("input_truncated", "input_truncated"), (r["id"], r["summary"])
        assert r["summary"].startswith("The input was cut off"), (r["id"], r["summary"])
        assert r["apply"]["status"] == "partial"
        graded_any = any(c["status"] != "not_evaluated" for c in r["criteria"].values())
        assert graded_any or all(c["rationale"].startswith("the input was cut off here")
                                 for c in r["criteria"].values()), r["id"]
    whole = [r for r in results if not r["apply"]["truncated"]]
    assert all("truncated" not in r["summary"] for r in whole)


def test_int8_entries_whose_kernel_hunk_was_cut_say_so(graded):
    _, results, _, _ = graded
    kernel = "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py"
    for r in results:
        if r["task"] != "int8-kv-rounding":
            continue
        files = {f["path"]: f for f in r["apply"]["files"]}
        cut_kernel = kernel in files and any(h["status"] == "truncated" for h in files[kernel]["hunks"])
        if cut_kernel or kernel not in files:
            assert r["apply"]["truncated"] and r["verdict"] == "input_truncated", r["id"]


def test_rocm_entry_with_an_unreleased_test_file_state_gets_a_precise_apply_report(graded):
    _, results, diffs, _ = graded
    path = "tests/kernels/moe/test_ocp_mx_moe.py"
    matching = [r for r, d in zip(results, diffs) if f"a/{path}" in d]
    assert matching, "the seed entry touching test_ocp_mx_moe.py"
    for r in matching:
        report = {f["path"]: f for f in r["apply"]["files"]}[path]
        assert report["hunks"], report
        for hunk in report["hunks"]:
            assert hunk["header"].startswith("@@") or hunk["status"] == "truncated"
            assert hunk["status"] in ("applied", "offset", "fuzz", "failed", "truncated")
            if hunk["status"] in ("offset", "fuzz", "failed"):
                assert hunk["detail"], hunk
