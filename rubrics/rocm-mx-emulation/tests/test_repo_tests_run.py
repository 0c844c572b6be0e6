"""c1 (behaviour of the repo's oracle test file): run the patched tree's tests/quantization/test_gfx950_moe.py.

That file selects backends through the oracle only, so the subject runs it in a nested pytest session under its
ROCm harness (``probes/rocm_mx_harness.py``) on each faked GPU and reports every test's outcome; what those
outcomes mean is decided here. When a candidate switches it to expect emulation on gfx942/gfx90a (the static check
only reads the text), the switched tests must really run there and pass, must still pass (or skip) on gfx950 and
CUDA, and must fail when the oracle hands gfx942 a native backend again: a test that cannot see the old selection
does not expect emulation. Candidates that switch other test files instead are not judged here (skipped).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.sandbox.client import ProbeRaised
from rubric_support import load_beside

devices = load_beside(__file__, "devices")

ORACLE_TEST = "tests/quantization/test_gfx950_moe.py"
EMULATION = re.compile(r"Mxfp4MoeBackend\.EMULATION|[\"']emulation[\"']")
# Emulation expectations the base's copy of the file already has (the gfx950 --moe-backend emulation case).
BASE_EMULATION_COUNT = 2

# Tests the base's copy of the file already has: they judge the code's gfx950 selection, which c5 covers, not
# whether the repo's tests were switched, so their failures are not counted here.
BASE_TESTS = {
    "test_w4a4_dispatches_to_aiter",
    "test_w4a4_falls_back_to_triton_unfused_without_aiter",
    "test_w4a4_dispatches_to_emulation_with_moe_backend",
}

# (label, arch or None for CUDA SM90, AITER enabled, whether the file must run and pass a test there)
RUNS = [
    ("gfx942 with AITER", "gfx942", True, True),
    ("gfx942 without AITER", "gfx942", False, True),
    ("gfx90a", "gfx90a", False, True),
    ("gfx950 with AITER", "gfx950", True, False),
    ("gfx950 without AITER", "gfx950", False, False),
    ("CUDA SM90", None, False, False),
]


def _outcomes(observed: dict) -> dict:
    """What a run of the file means here: collection errors, and the passed / failed / skipped tests, with the
    base's own tests left out."""
    got = {"errors": [f"collection: {e}" for e in observed["collect_errors"]], "passed": [], "failed": [],
           "skipped": []}
    for report in observed["reports"]:
        name = report["nodeid"].rsplit("::", 1)[-1]
        if name.split("[", 1)[0] in BASE_TESTS:
            continue
        if report["outcome"] == "failed":
            got["failed"].append(f"{name} ({report['when']}): {report['longrepr']}")
        elif report["when"] == "call" and report["outcome"] == "passed":
            got["passed"].append(report["nodeid"])
        elif report["outcome"] == "skipped":
            got["skipped"].append(report["nodeid"])
    return got


def _run_file(subject, device: dict, force_native: bool = False) -> dict:
    """Run the tree's file in a nested pytest session in the subject, on ``device``."""
    return _outcomes(subject.call("rocm_mx_repo_tests.run_test_file", device=device, path=ORACLE_TEST,
                                  force_native=force_native))


def _device(arch, aiter) -> dict:
    return devices.cuda((9, 0)) if arch is None else devices.rocm(arch, aiter)


# The run of the file is judged once per process: the test below and c1's all-cases test judge the same runs (the
# judge grades one tree).
_RUN_PROBLEMS: dict = {}


def switched_run_problems(subject, vllm_tree) -> list[str] | None:
    """None when the tree's oracle test file is not switched to expect emulation (a failed case of c1); else what
    is wrong with its runs on the faked GPUs (empty when nothing is)."""
    key = str(vllm_tree)
    if key in _RUN_PROBLEMS:
        return _RUN_PROBLEMS[key]
    path = Path(vllm_tree) / ORACLE_TEST
    if not path.is_file() or len(EMULATION.findall(path.read_text(errors="replace"))) <= BASE_EMULATION_COUNT:
        _RUN_PROBLEMS[key] = None
        return None

    problems = []
    for label, arch, aiter, must_run in RUNS:
        got = _run_file(subject, _device(arch, aiter))
        if got["errors"] or got["failed"]:
            problems.append(f"{label}: " + "; ".join((got["errors"] + got["failed"])[:3]))
        elif must_run and not got["passed"]:
            problems.append(f"{label}: no test ran (all {len(got['skipped'])} skipped)")

    # Sensitivity: on gfx942 the oracle picks a native backend again, as before the fix.
    got = _run_file(subject, devices.rocm("gfx942", True), force_native=True)
    if not got["failed"] and not got["errors"]:
        problems.append("gfx942 with the oracle picking TRITON_UNFUSED: every test still passes or skips, so "
                        "the tests do not expect emulation")
    _RUN_PROBLEMS[key] = problems
    return problems


@pytest.mark.criterion("c1", weight=8)
@pytest.mark.cases(path="repo-tests", arch=["gfx942", "gfx90a"])
def test_switched_oracle_tests_run_and_expect_emulation(subject, vllm_tree):
    """The repo's switched oracle tests pass on every faked GPU, run on gfx942/gfx90a and catch a native pick."""
    problems = switched_run_problems(subject, vllm_tree)
    # Not switched is c1's own case ("the repo's tests switched rather than skipped"): it fails, never skips, so
    # nothing the candidate's source holds turns this check into an unevaluated one.
    assert problems is not None, f"{ORACLE_TEST} is not switched to expect emulation on gfx942/gfx90a"
    assert not problems, f"{ORACLE_TEST}: " + " | ".join(problems)


# c1 names two GPUs (gfx942, gfx90a), three selectors (the oracle, the quark OCP MX method, the gpt-oss method),
# three activation schemes (BF16, dynamic MXFP4, static FP8) and the repo's tests switched rather than skipped.
# Its per-case tests weigh 1 each (14), the static repo-test checks 6 and 2, the run above 8: the gpt-oss method
# failing on both GPUs alone would leave c1 met (28 of 30), the quark method alone too (24 of 30). This test fails
# when any c1 check does, so any one wrong case leaves c1 below met (at most 29 of 40, or 21 of 32 where the run
# above is skipped), while behaviour right with the repo's tests skipped instead of switched stays partial
# (14 of 32) and right with the tests untouched too (16 of 32).
@pytest.mark.static
@pytest.mark.criterion("c1", weight=10)
@pytest.mark.cases(path=["oracle", "quark", "gpt-oss", "repo-tests"], arch=["gfx942", "gfx90a"],
                   aiter_ops=["aiter-on", "aiter-off"], scheme=["bf16", "mxfp4_dynamic", "fp8_static"])
def test_emulation_selected_and_expected_in_every_case(subject, vllm_tree):
    """Every selector (oracle, quark, gpt-oss) picks emulation for every activation scheme on gfx942 and gfx90a, and the repo's tests are switched to expect it (not skipped) and pass when run."""
    selection = load_beside(__file__, "test_backend_selection")
    static = load_beside(__file__, "test_repo_tests_static")
    cases = []
    for param in selection.NON_GFX950:
        arch, aiter = param.values
        for scheme in selection.ACT_SCHEMES:
            cases.append((selection.test_oracle_selects_emulation_on_non_gfx950,
                          dict(arch=arch, aiter=aiter, scheme=scheme), f"oracle-{param.id}-{scheme}"))
            cases.append((selection.test_quark_moe_method_uses_emulation_on_non_gfx950,
                          dict(arch=arch, aiter=aiter, scheme=scheme), f"quark-{param.id}-{scheme}"))
        cases.append((selection.test_gpt_oss_moe_method_uses_emulation_on_non_gfx950, dict(arch=arch, aiter=aiter),
                      f"gpt-oss-{param.id}"))
    wrong = []
    for check, kwargs, label in cases:
        try:
            check(subject, **kwargs)
        except (AssertionError, ProbeRaised) as exc:  # every wrong case is reported with the rest
            wrong.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
    for check, label in ((static.test_repo_tests_expect_emulation_on_non_gfx950, "repo tests switched"),
                         (static.test_repo_tests_not_skipped_on_non_gfx950, "repo tests not skipped")):
        try:
            check(vllm_tree)
        except AssertionError as exc:
            wrong.append(f"{label}: {str(exc)[:200]}")
    try:
        problems = switched_run_problems(subject, vllm_tree)
    except (AssertionError, ProbeRaised) as exc:
        problems = [f"{type(exc).__name__}: {str(exc)[:200]}"]
    if problems:
        wrong.append(f"{ORACLE_TEST} run: " + " | ".join(problems)[:400])
    assert not wrong, "; ".join(wrong)
