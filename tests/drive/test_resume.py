"""A killed run resumes without regrading or losing candidates; identical runs give identical results.

Runs ``grade.py`` as a subprocess on four int8-kv-rounding samples (the fastest hidden suite): the first run is
killed with SIGKILL as soon as its first result is stored, the rerun must take that one from the store and grade
the rest; a third, fresh run (``--no-cache``) must give a byte-identical ``results.json`` apart from the fields
documented as timings (``run.timings`` and each candidate's ``timings``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.pipeline.checkout import cache_dir
from grader.reports.report import comparable, differences

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SAMPLES = ["libdevice-rint", "key-only", "plus-half-truncate", "round-no-clamp"]
TASK = "int8-kv-rounding"
IDS = sorted(f"{TASK}/{name}" for name in SAMPLES)
CACHE: Path = Path()


def _private_cache(root: Path) -> Path:
    """A cache sharing the built bases (and the rest) but with an evidence cache of its own: evidence left by
    other runs (other grader versions) must not decide these results."""
    shared = cache_dir()
    private = root / "cache"
    private.mkdir()
    for entry in shared.iterdir() if shared.is_dir() else []:
        if entry.name != "evidence":
            os.symlink(entry, private / entry.name)
    return private


def _grade(paths: list[Path], out: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", GRADER_CACHE=str(CACHE))
    return subprocess.Popen([sys.executable, str(REPO / "grade.py"), *map(str, paths), "--out", str(out),
                             "--jobs", "1", "--gpu", "off", "--timeout", "300", *extra],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 900) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        _kill_session(proc)
    return out


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def strip_timings(document: dict) -> dict:
    """``results.json`` without the fields the README documents as varying between identical runs."""
    return comparable(document)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    global CACHE
    root = tmp_path_factory.mktemp("resume")
    CACHE = _private_cache(root)
    inputs = root / "in" / TASK
    inputs.mkdir(parents=True)
    for name in SAMPLES:
        shutil.copy(REPO / "candidates" / TASK / f"{name}.diff", inputs / f"{name}.diff")
    out = root / "out"
    store = out / "store"

    # Run 1: killed with SIGKILL once the first result is stored. --no-cache keeps earlier runs' shared evidence
    # from finishing everything at once (it still stores what it grades).
    first = _grade([root / "in"], out, "--no-cache")
    deadline = time.monotonic() + 600
    try:
        while not (store.is_dir() and any(store.glob("*.json"))):
            assert first.poll() is None, f"run 1 ended before it was killed:\n{first.stdout.read()}"
            assert time.monotonic() < deadline, "no result stored within 10 minutes"
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        _kill_session(first)
    first.stdout.close()
    stored = {p.name: p.stat().st_mtime_ns for p in store.glob("*.json")}
    time.sleep(0.05)

    # Run 2: resumes.
    second = _grade([root / "in"], out)
    log2 = _finish(second)
    results2 = json.loads((out / "results.json").read_text())

    # Run 3: everything regraded from scratch into a fresh folder, the naive way: serial, cold, uncached.
    fresh = root / "fresh"
    third = _grade([root / "in"], fresh, "--no-cache", "--cold")
    log3 = _finish(third)
    results3 = json.loads((fresh / "results.json").read_text())

    # Runs 4 and 5: parallel warm workers with the caches on, then the same again served from the caches.
    parallel = root / "parallel"
    fourth = _grade([root / "in"], parallel, "--jobs", "2")
    log4 = _finish(fourth)
    results4 = json.loads((parallel / "results.json").read_text())
    fifth = _grade([root / "in"], parallel, "--jobs", "2")
    log5 = _finish(fifth)
    results5 = json.loads((parallel / "results.json").read_text())
    return {"stored": stored, "store": store, "log2": log2, "rc2": second.returncode, "results2": results2,
            "log3": log3, "rc3": third.returncode, "results3": results3,
            "log4": log4, "results4": results4, "log5": log5, "results5": results5}


def test_killed_run_resumes_without_regrading_or_losing_candidates(runs):
    assert runs["rc2"] == 0, runs["log2"]
    assert 1 <= len(runs["stored"]) < len(SAMPLES), "the kill came too late to test resumption"
    progress = [line for line in runs["log2"].splitlines() if line.startswith("[")]
    assert len(progress) == len(SAMPLES), runs["log2"]
    cached = [line for line in progress if line.endswith("(cached)")]
    assert len(cached) == len(runs["stored"]), runs["log2"]
    # What run 1 finished was not rewritten...
    for name, mtime in runs["stored"].items():
        assert (runs["store"] / name).stat().st_mtime_ns == mtime, f"{name} was regraded"
    # ...and nothing is lost: every candidate has a stored result and a place in results.json.
    assert len(list(runs["store"].glob("*.json"))) == len(SAMPLES)
    assert sorted(r["id"] for r in runs["results2"]["candidates"]) == IDS
    assert all(r["verdict"] != "error" for r in runs["results2"]["candidates"])


def test_identical_runs_give_identical_results_apart_from_timings(runs):
    assert runs["rc3"] == 0, runs["log3"]
    assert all(not line.endswith("(cached)") for line in runs["log3"].splitlines())
    resumed, fresh = strip_timings(runs["results2"]), strip_timings(runs["results3"])
    if resumed != fresh:
        differing = differences(resumed, fresh)
        pytest.fail("results.json differs outside timings at: " + "; ".join(differing[:20]))
    assert json.dumps(resumed, indent=2, sort_keys=True) == json.dumps(fresh, indent=2, sort_keys=True)


def test_parallel_and_cached_runs_equal_a_serial_uncached_run(runs):
    serial = strip_timings(runs["results3"])
    assert sum(line.endswith("(cached)") for line in runs["log5"].splitlines()) == len(SAMPLES), runs["log5"]
    # A run that ran hidden tests said when its warm workers started and how long that took (one found every
    # result in the evidence cache or the store, and started none).
    for log in (runs["log4"], runs["log5"]):
        tested = [line for line in log.splitlines() if line.startswith("[") and " in " in line
                  and "cached)" not in line]
        started = [line for line in log.splitlines() if line.startswith("warm worker") and ": ready in " in line]
        assert bool(started) == bool(tested), log
    for name in ("results4", "results5"):
        other = strip_timings(runs[name])
        assert other == serial, "; ".join(differences(other, serial)[:20])
