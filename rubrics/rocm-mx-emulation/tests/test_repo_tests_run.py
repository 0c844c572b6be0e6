"""c1 (behaviour of the repo's oracle test file): run the patched tree's tests/quantization/test_gfx950_moe.py.

That file selects backends through the oracle only, so it runs here under the harness of conftest.py on each
faked GPU. When a candidate switches it to expect emulation on gfx942/gfx90a (the static check only reads the
text), the switched tests must really run there and pass, must still pass (or skip) on gfx950 and CUDA, and
must fail when the oracle hands gfx942 a native backend again: a test that cannot see the old selection does
not expect emulation. Candidates that switch other test files instead are not judged here (skipped).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

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


class _Outcomes:
    """Inner-session plugin: the outcome of every test and every collection error."""

    def __init__(self):
        self.passed: list[str] = []
        self.failed: list[str] = []
        self.skipped: list[str] = []
        self.errors: list[str] = []

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"collection: {str(report.longrepr)[-600:]}")

    def pytest_runtest_logreport(self, report):
        if report.nodeid.rsplit("::", 1)[-1].split("[", 1)[0] in BASE_TESTS:
            return
        if report.failed:
            self.failed.append(f"{report.nodeid.rsplit('::', 1)[-1]} ({report.when}): {str(report.longrepr)[-400:]}")
        elif report.when == "call" and report.passed:
            self.passed.append(report.nodeid)
        elif report.skipped:
            self.skipped.append(report.nodeid)


def _run_file(path: Path, ini: Path) -> _Outcomes:
    """Run ``path`` in a nested pytest session; its module is imported afresh (module-level platform checks)."""
    for name, mod in list(sys.modules.items()):
        if getattr(mod, "__file__", None) and Path(mod.__file__).resolve() == path.resolve():
            del sys.modules[name]
    outcomes = _Outcomes()
    pytest.main(
        [str(path), "-q", "-s", "-c", str(ini), "--rootdir", str(path.parent), "--noconftest",
         "--import-mode=importlib", "-p", "no:cacheprovider", "-W", "ignore"],
        plugins=[outcomes],
    )
    return outcomes


def _set(rocm, arch, aiter):
    if arch is None:
        rocm.set_cuda((9, 0))
    else:
        rocm.set_rocm(arch, aiter=aiter)
    rocm.fake_triton_kernels(True)
    rocm.fake_vllm_config()


@pytest.mark.criterion("c1", weight=8)
def test_switched_oracle_tests_run_and_expect_emulation(rocm, vllm_tree, tmp_path, monkeypatch):
    """The repo's switched oracle tests pass on every faked GPU, run on gfx942/gfx90a and catch a native pick."""
    path = Path(vllm_tree) / ORACLE_TEST
    if not path.is_file() or len(EMULATION.findall(path.read_text(errors="replace"))) <= BASE_EMULATION_COUNT:
        pytest.skip(f"{ORACLE_TEST} is not switched to expect emulation; other test files are read statically only")
    # The nested session must not load installed plugins (the grader's evidence writer among them).
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    ini = tmp_path / "inner.ini"
    ini.write_text("[pytest]\n")

    # Import the oracle while the harness plays ROCm (vLLM's import-time probes need no CUDA extension then).
    import vllm.model_executor.layers.fused_moe.oracle.mxfp4 as oracle

    problems = []
    for label, arch, aiter, must_run in RUNS:
        _set(rocm, arch, aiter)
        got = _run_file(path, ini)
        if got.errors or got.failed:
            problems.append(f"{label}: " + "; ".join((got.errors + got.failed)[:3]))
        elif must_run and not got.passed:
            problems.append(f"{label}: no test ran (all {len(got.skipped)} skipped)")

    # Sensitivity: on gfx942 the oracle picks a native backend again, as before the fix.
    _set(rocm, "gfx942", True)
    native = type("NativeExpertsStandIn", (), {})
    monkeypatch.setattr(oracle, "select_mxfp4_moe_backend",
                        lambda *args, **kwargs: (oracle.Mxfp4MoeBackend.TRITON_UNFUSED, native))
    got = _run_file(path, ini)
    if not got.failed and not got.errors:
        problems.append("gfx942 with the oracle picking TRITON_UNFUSED: every test still passes or skips, so "
                        "the tests do not expect emulation")
    assert not problems, f"{ORACLE_TEST}: " + " | ".join(problems)
