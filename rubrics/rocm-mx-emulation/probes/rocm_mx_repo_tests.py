"""Probe for rocm-mx-emulation, run in the subject: run one of the tree's own test files in a nested pytest
session under the ROCm harness, on a faked GPU, and report the outcome of every test and every collection error.

The candidate's test file is the candidate's code: it runs here, and what it did comes back as data (the judge
decides which outcomes count and what they mean)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import rocm_mx_harness

ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"


class _Outcomes:
    """Inner-session plugin: every collection error and every test phase's report, as data."""

    def __init__(self):
        self.collect_errors: list[str] = []
        self.reports: list[dict] = []

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(str(report.longrepr)[-600:])

    def pytest_runtest_logreport(self, report):
        self.reports.append({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                             "longrepr": str(report.longrepr)[-400:] if report.longrepr else ""})


def _tree_root() -> Path:
    import vllm

    return Path(vllm.__file__).resolve().parent.parent


def run_test_file(device: dict, path: str, force_native: bool = False) -> dict:
    """Run ``path`` (relative to the tree this subject holds) on ``device``, its module imported afresh
    (module-level platform checks); with ``force_native``, the oracle is replaced by one that picks
    ``TRITON_UNFUSED`` with a stand-in experts class, as before the fix. Returns ``{"exit_code", "collect_errors",
    "reports": [{"nodeid", "when", "outcome", "longrepr"}]}``."""
    import pytest

    file = _tree_root() / path
    with rocm_mx_harness.device(ORACLE) as h:
        h.apply(device)
        oracle = sys.modules[ORACLE]
        h.fake_triton_kernels(True)
        h.fake_vllm_config()
        if force_native:
            native = type("NativeExpertsStandIn", (), {})
            h.patches.set(oracle, "select_mxfp4_moe_backend",
                          lambda *args, **kwargs: (oracle.Mxfp4MoeBackend.TRITON_UNFUSED, native))
        for name, mod in list(sys.modules.items()):
            if getattr(mod, "__file__", None) and Path(mod.__file__).resolve() == file.resolve():
                del sys.modules[name]
        outcomes = _Outcomes()
        # The nested session must not load installed plugins.
        old = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        try:
            with tempfile.TemporaryDirectory() as scratch:
                ini = Path(scratch) / "inner.ini"
                ini.write_text("[pytest]\n")
                code = pytest.main(
                    [str(file), "-q", "-s", "-c", str(ini), "--rootdir", str(file.parent), "--noconftest",
                     "--import-mode=importlib", "-p", "no:cacheprovider", "-W", "ignore"],
                    plugins=[outcomes],
                )
        finally:
            if old is None:
                os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
            else:
                os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = old
        return {"exit_code": int(code), "collect_errors": outcomes.collect_errors, "reports": outcomes.reports}
