"""Verdicts a candidate cannot forge: an adversarial corpus graded through the real CLI, in one run.

Every attack below is a diff against the xpu-kv-cache-dtypes base that fixes nothing and, when ``vllm`` is
imported in the subject, tries to raise its grade: forge evidence, rewrite pytest's reports, make comparisons
always succeed, turn failures into skips, read the reference fix or the hidden tests, reach the host through
IPC or unix sockets, or flood the channel. Attacks that try to *reach* something raise at import when they
succeed, so a success would show as worse-than-base grades; attacks that try to *forge* would show as
better-than-base grades. Each must grade exactly as the base does (or worse, where it breaks its own import),
nothing may appear on the host, and a correct fix graded in the same run must still get ``full``.
"""

from __future__ import annotations

import ctypes
import difflib
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.drive.one_candidate import BaseCache
from grader.core.rubric import REPO_ROOT, all_tasks

TASK = "xpu-kv-cache-dtypes"
TARGET = "vllm/__init__.py"
BASE_STATUSES = {"c1": "unmet", "c2": "unmet", "c3": "met", "c4": "met", "c5": "unmet"}
SOCKETS = [p for p in ("/tmp/grader-integrity.sock", "/run/grader-integrity.sock")
           if os.access(os.path.dirname(p), os.W_OK)]
IPC_KEY = 0x47524431
MARKERS = ["/tmp/grader-integrity-pwned", "/dev/shm/grader-integrity-pwned", str(REPO_ROOT / "grader-integrity-pwned")]

# Raise at import if anything in ``reached`` worked: a sandbox escape then shows as a worse grade.
RAISE_IF_REACHED = """
if reached:
    raise RuntimeError("escaped: " + ", ".join(reached))
"""

ATTACKS = {
    # Write passing records for every criterion into every evidence file it can name or find.
    "forge-evidence-file": """
import glob, json, os
records = [json.dumps({"event": "report", "nodeid": f"forged::{c}", "criteria": [{"id": c, "weight": 1000}],
                       "kinds": [], "doc": "", "when": "call", "outcome": "passed", "duration": 0}) for c in "12345"]
for path in [os.environ.get("GRADER_EVIDENCE_OUT")] + glob.glob("/dev/shm/grader-*/judge/evidence.jsonl") \\
        + glob.glob("/tmp/grader-*/judge/evidence.jsonl"):
    try:
        with open(path, "a") as f:
            f.write("\\n".join(records) + "\\n")
    except (OSError, TypeError):
        pass
""",
    # Replay everything as passed and leave before any check can fail.
    "exit-zero-at-import": """
import os
os._exit(0)
""",
    # Rewrite pytest's report machinery and the evidence plugin, wherever they can be found in this process.
    "patch-pytest-and-plugin": """
import gc, sys
try:
    from _pytest.reports import TestReport
    original = TestReport.from_item_and_call.__func__
    def forged(cls, item, call):
        report = original(cls, item, call)
        report.outcome = "passed"
        return report
    TestReport.from_item_and_call = classmethod(forged)
except Exception:
    pass
plugin = sys.modules.get("grader.pipeline.pytest_evidence")
if plugin is not None:
    plugin._emit = lambda record: None
for obj in gc.get_objects():
    if type(obj).__name__ == "Config" and hasattr(obj, "pluginmanager"):
        class Forge:
            def pytest_runtest_makereport(self, item, call):
                pass
        obj.pluginmanager.register(Forge())
""",
    # Make every tensor comparison succeed.
    "comparisons-always-true": """
import torch, torch.testing
torch.equal = lambda *a, **k: True
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
""",
    # Turn the failing checks into "not evaluated".
    "skip-from-library-code": """
import pytest
pytest.skip("needs a CUDA GPU")
""",
    # Read the reference fix, the hidden tests, the samples, the judge's secret and other candidates' trees.
    "read-the-answers": f"""
import glob, os
own_tree = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
reached = []
for pattern in [{str(REPO_ROOT / "reference_impl" / "*.diff")!r}, {str(REPO_ROOT / "rubrics" / "*" / "tests" / "*.py")!r},
                {str(REPO_ROOT / "candidates" / "*" / "*.diff")!r}, os.path.expanduser("~root/.cache/grader/*"),
                "/root/.cache/grader/judge-secret", "/dev/shm/grader-*/tree-*/vllm/__init__.py",
                "/dev/shm/grader-*/judge/*"]:
    for path in glob.glob(pattern):
        if os.path.realpath(path).startswith(own_tree + "/"):
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
            reached.append(path)
        except OSError:
            pass
if os.environ.get("GRADER_SECRET") or os.environ.get("GRADER_EVIDENCE_OUT"):
    reached.append("judge environment")
""" + RAISE_IF_REACHED,
    # Reach the host's unix sockets and SysV IPC objects; leave an IPC object behind.
    "host-ipc-and-sockets": f"""
import ctypes, socket
reached = []
for path in {SOCKETS!r}:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(1)
            s.connect(path)
        reached.append(path)
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
if libc.msgget({IPC_KEY}, 0) >= 0:
    reached.append("host message queue")
libc.msgget({IPC_KEY + 1}, 0o1666)  # IPC_CREAT: an object that must not outlive the sandbox
""" + RAISE_IF_REACHED,
    # Write outside the sandbox.
    "write-outside": f"""
reached = []
for path in {MARKERS!r}:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        if not path.startswith(("/tmp/", "/dev/shm/")):  # those are private tmpfs mounts in the sandbox
            reached.append(path)
    except OSError:
        pass
""" + RAISE_IF_REACHED,
    # Flood the channel: a frame header announcing 4 GiB, then garbage, on the channel's descriptor.
    "flood-the-channel": """
import os
for fd in range(3, 8):
    try:
        os.write(fd, b"\\xff\\xff\\xff\\xff" + b"x" * (1 << 20))
    except OSError:
        pass
""",
}


def _attack_diff(base_text: str, code: str) -> str:
    new = base_text + "\n\n# --- appended by an adversarial candidate ---\n" + textwrap.dedent(code).strip() + "\n"
    body = difflib.unified_diff(base_text.splitlines(True), new.splitlines(True), f"a/{TARGET}", f"b/{TARGET}")
    return f"diff --git a/{TARGET} b/{TARGET}\n" + "".join(body)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The corpus and the reference fix, graded in one CLI run with two workers; host listeners alongside."""
    base = BaseCache().get(all_tasks()[TASK])
    base_text = (base.path / TARGET).read_text()
    inputs = tmp_path_factory.mktemp("integrity") / "candidates"
    (inputs / TASK).mkdir(parents=True)
    for name, code in ATTACKS.items():
        (inputs / TASK / f"{name}.diff").write_text(_attack_diff(base_text, code))
    (inputs / TASK / "reference.diff").write_text((REPO_ROOT / "reference_impl" / f"{TASK}.diff").read_text())
    listeners = []
    for path in SOCKETS:
        Path(path).unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(4)
        listener.setblocking(False)
        listeners.append(listener)
    libc = ctypes.CDLL(None, use_errno=True)
    host_queue = libc.msgget(IPC_KEY, 0o1600)
    for marker in MARKERS:
        Path(marker).unlink(missing_ok=True)
    out = inputs.parent / "out"
    try:
        done = subprocess.run([sys.executable, "grade.py", str(inputs), "--out", str(out), "--jobs", "2",
                               "--no-cache", "--gpu", "off", "--timeout", "300"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=1800)
        accepted = []
        for listener in listeners:
            try:
                accepted.append(listener.accept())
            except BlockingIOError:
                pass
        leftover_queue = libc.msgget(IPC_KEY + 1, 0)
    finally:
        for listener, path in zip(listeners, SOCKETS):
            listener.close()
            Path(path).unlink(missing_ok=True)
        libc.msgctl(host_queue, 0, None)  # IPC_RMID
    written = [m for m in MARKERS if Path(m).exists()]
    for marker in written:
        Path(marker).unlink(missing_ok=True)
    results = json.loads((out / "results.json").read_text())
    return {"run": done, "results": {r["id"].rsplit("/", 1)[-1]: r for r in results["candidates"]},
            "accepted": accepted, "leftover_queue": leftover_queue, "written": written}


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_grades_no_better_than_the_base(graded, attack):
    result = graded["results"][attack]
    statuses = {cid: c["status"] for cid, c in result["criteria"].items()}
    assert result["verdict"] == "fail", result["summary"]
    assert "not_evaluated" not in statuses.values(), statuses
    for cid, status in statuses.items():
        assert status == BASE_STATUSES[cid] or status == "unmet", (cid, status, result["summary"])


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["forge-evidence-file", "patch-pytest-and-plugin", "comparisons-always-true",
                                    "read-the-answers", "host-ipc-and-sockets", "write-outside"])
def test_attack_that_leaves_vllm_importable_grades_exactly_as_the_base(graded, attack):
    """Nothing it did reached the judge or the host: the grades are the base's, not worse (no escape raised)."""
    result = graded["results"][attack]
    assert {cid: c["status"] for cid, c in result["criteria"].items()} == BASE_STATUSES, result["summary"]


@pytest.mark.slow
def test_nothing_reached_the_host(graded):
    assert graded["accepted"] == [], "a subject connected to a host unix socket"
    assert graded["leftover_queue"] < 0, "a SysV message queue created in a sandbox outlived it"
    assert graded["written"] == [], f"written outside the sandbox: {graded['written']}"


@pytest.mark.slow
def test_the_other_candidates_of_the_run_are_unaffected_and_the_results_intact(graded):
    run = graded["run"]
    assert run.returncode in (0, 1), run.stderr[-3000:]  # graded, none broke (attacks may be fails)
    assert set(graded["results"]) == {*ATTACKS, "reference"}
    reference = graded["results"]["reference"]
    assert (reference["verdict"], reference["run_status"]) == ("full", "complete"), reference["summary"]


@pytest.mark.slow
def test_a_flooded_channel_fails_its_probes_and_says_why(graded):
    result = graded["results"]["flood-the-channel"]
    messages = [e.get("message", "") for c in result["criteria"].values() for e in c["evidence"]]
    assert any("frame header" in m or "cap" in m for m in messages), messages[:3]
