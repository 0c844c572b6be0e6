"""The same grade for every secret: every sample of every task (or of ``$GRADER_TEST_TASKS``) is graded under five
judge secrets, and each gets the same verdict, score, criterion statuses and scores, and check statuses under all
of them. A check that passes for some drawn inputs and fails for others is named with the secrets it split.

Each secret grades in a process of its own, over a cache of its own (``$GRADER_CACHE`` with ``judge-secret`` and
``sdists`` linked to the shared one): its bases, call budgets and controls are its own, and the evidence cache is
off, so nothing graded under one secret is replayed under another. The caches live under the shared cache
(``by-secret/<digest of the secret>``) so that a second run does not build the bases again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.core.paths import cache_dir
from grader.core.rubric import REPO_ROOT

SECRETS = ("same-grade-secret-1", "same-grade-secret-2", "same-grade-secret-3", "same-grade-secret-4",
           "same-grade-secret-5")
GRADE_TIMEOUT_S = 6 * 3600
# How many secrets grade at once (each in its own process, two samples at a time): 1 on a small machine; a machine
# with many cores (the lent GPU machine's 16) sets $GRADER_TEST_SECRETS_AT_ONCE to 5.
SECRETS_AT_ONCE = int(os.environ.get("GRADER_TEST_SECRETS_AT_ONCE", "1"))

# Run in a process whose $GRADER_CACHE is the secret's cache: grades every sample with tests/e2e/test_samples.py's
# own grade_samples (the base as the empty diff) and prints one JSON document of what each got.
GRADE_ALL = """
import json, sys
sys.path[:0] = ["tests/e2e", "tests"]  # test_samples, and the conftest it may read
from test_samples import grade_samples

def said(result):
    checks = {e.test: e.status for r in result.criteria.values() for e in r.evidence}
    return {"run_status": result.run_status, "verdict": result.verdict, "score": result.score,
            "criteria": {cid: [r.status, r.score] for cid, r in result.criteria.items()}, "checks": checks,
            "why": "" if result.run_status == "complete" else result.summary}

print(json.dumps({f"{task}/{name}": said(result) for (task, name), (result, _) in grade_samples().items()},
                 sort_keys=True))
"""


def secret_cache(secret: str) -> Path:
    """A cache of the secret's own beside the shared one, the shared sdists linked in; named by the secret's
    digest, never by the secret."""
    shared = cache_dir()
    folder = shared / "by-secret" / hashlib.sha256(secret.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    (shared / "sdists").mkdir(parents=True, exist_ok=True)
    if not (folder / "sdists").is_symlink():
        (folder / "sdists").symlink_to(shared / "sdists")
    (folder / "judge-secret").write_text(secret + "\n")
    return folder


def grades_under(secret: str) -> dict[str, dict]:
    env = {**os.environ, "GRADER_CACHE": str(secret_cache(secret))}
    done = subprocess.run([sys.executable, "-c", GRADE_ALL], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=GRADE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def disagreements(by_secret: dict[str, dict[str, dict]]) -> list[str]:
    """Each sample whose grade differs between secrets: what differs, with the value under each secret."""
    found = []
    first = next(iter(by_secret.values()))
    for sample in first:
        grades = {secret: graded[sample] for secret, graded in by_secret.items()}
        for field in ("run_status", "verdict", "score", "criteria"):
            values = {json.dumps(g[field], sort_keys=True) for g in grades.values()}
            if len(values) > 1:
                found.append(f"{sample} {field}: " + "; ".join(f"{s}: {g[field]}" for s, g in grades.items()))
        tests = sorted({t for g in grades.values() for t in g["checks"]})
        for test in tests:
            statuses = {s: g["checks"].get(test, "absent") for s, g in grades.items()}
            if len(set(statuses.values())) > 1:
                found.append(f"{sample} check {test}: " + ", ".join(f"{s} {v}" for s, v in statuses.items()))
    return found


def test_disagreements_name_the_sample_the_field_and_each_secret():
    same = {"run_status": "complete", "verdict": "full", "score": 1.0, "criteria": {"c1": ["met", 1.0]},
            "checks": {"t::a": "passed"}}
    split = {**same, "verdict": "partial", "score": 0.8, "criteria": {"c1": ["partial", 0.5]},
             "checks": {"t::a": "failed"}}
    assert disagreements({"s1": {"x/y": same}, "s2": {"x/y": same}}) == []
    assert disagreements({"s1": {"x/y": same}, "s2": {"x/y": split}}) == [
        "x/y verdict: s1: full; s2: partial", "x/y score: s1: 1.0; s2: 0.8",
        "x/y criteria: s1: {'c1': ['met', 1.0]}; s2: {'c1': ['partial', 0.5]}",
        "x/y check t::a: s1 passed, s2 failed"]


@pytest.mark.slow
def test_every_sample_gets_the_same_grade_under_five_secrets():
    with ThreadPoolExecutor(max_workers=SECRETS_AT_ONCE) as pool:
        by_secret = dict(zip(SECRETS, pool.map(grades_under, SECRETS)))
    samples = {secret: sorted(graded) for secret, graded in by_secret.items()}
    assert len({tuple(s) for s in samples.values()}) == 1, samples
    incomplete = sorted({f"{sample} ({g['run_status']}): {g['why']}" for graded in by_secret.values()
                         for sample, g in graded.items() if g["run_status"] != "complete"})
    assert not incomplete, "gradings that did not complete say nothing about the secret:\n" + "\n".join(incomplete)
    found = disagreements(by_secret)
    assert not found, "samples graded differently by secret:\n" + "\n".join(found)
