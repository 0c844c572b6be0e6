"""On a CUDA GPU (the H200): minimax-qk-norm's speed criterion is timed by the judge, not by the candidate.

``tests/adversarial/gpu/minimax-forged-speed.diff`` is the reference fix made really slower on the GPU (a device
spin of about 150 us in every ``forward_qkv`` call) that also forges every timer and report it can reach in its own
process: ``time.perf_counter`` runs four times slow, and the old speed runner's comparison is rewritten to shrink
the candidate's samples sixteenfold. Against the runner's own timings this kind of candidate got ``full``; timed from
the judge it fails every speed case, so its grade is ``partial`` or below, while the reference fix, graded in the
same run, stays ``full``.

Run: ``GRADER_CACHE=... .venv/bin/python -m pytest tests/adversarial/test_gpu_speed_forgery.py -m gpu -q``
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grader.core.rubric import REPO_ROOT

TASK = "minimax-qk-norm"
FORGED = REPO_ROOT / "tests" / "adversarial" / "gpu" / "minimax-forged-speed.diff"


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_a_forged_speed_runner_is_not_graded_full_and_the_reference_still_is(tmp_path):
    inputs = tmp_path / "candidates" / TASK
    inputs.mkdir(parents=True)
    (inputs / "forged-speed.diff").write_text(FORGED.read_text())
    (inputs / "reference.diff").write_text((REPO_ROOT / "reference_impl" / f"{TASK}.diff").read_text())
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "grade.py", str(inputs.parent), "--out", str(out), "--jobs", "1",
                           "--no-cache", "--gpu", "on"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=3600)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: the forged candidate may be a fail
    results = {r["id"].rsplit("/", 1)[-1]: r for r in json.loads((out / "results.json").read_text())["candidates"]}
    reference, forged = results["reference"], results["forged-speed"]
    assert (reference["verdict"], reference["run_status"]) == ("full", "complete"), reference["summary"]
    assert forged["verdict"] in ("partial", "fail"), forged["summary"]
    speed = [e for e in forged["criteria"]["c1"]["evidence"] if "test_faster_than_regressed_path" in e["test"]]
    assert len(speed) == 5 and all(e["status"] == "failed" for e in speed), speed
    assert all("as the judge measured them" in e.get("message", "") for e in speed), speed[0]
