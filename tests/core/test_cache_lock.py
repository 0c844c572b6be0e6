"""What one grader process makes for every grader on the machine is made once (``grader.core.paths.cache_lock``):
another process holding the lock is waited for, and what it made is then found, not made again.

- The lock excludes another process: a block entered while another process holds the lock runs only after that
  process let go.
- A cache where no lock file can be made runs the block unlocked.
- The controls' call times and a task's control: when another process made the record while this one waited on
  the lock, this one reads it and measures or grades nothing.
- A Ray actor runs its candidate's task control before the candidate, and a control that does not hold gives
  the candidate ``environment_error`` without grading it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.core.paths import cache_lock
from grader.core.records import BuiltBase, Candidate, GradingOptions
from grader.core.rubric import all_tasks

REPO = Path(__file__).resolve().parents[2]
TASK = "int8-kv-rounding"


def hold_lock(name: str, then_write: Path, log: Path) -> subprocess.Popen:
    """Another process that takes the lock ``name``, says so in ``log``, waits, writes ``then_write`` (the record
    it made for everyone), notes that in ``log`` and lets go."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from grader.core.paths import cache_lock
        with cache_lock({name!r}):
            Path({str(log)!r}).write_text("held\\n")
            time.sleep(1.0)
            Path({str(then_write)!r}).parent.mkdir(parents=True, exist_ok=True)
            Path({str(then_write)!r}).write_text("{{}}")
            Path({str(log)!r}).write_text("held\\nreleased\\n")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not (log.is_file() and log.read_text().startswith("held")):
        assert proc.poll() is None and time.monotonic() < deadline, "the other process never took the lock"
        time.sleep(0.02)
    return proc


def test_a_held_lock_is_waited_for(own_cache, tmp_path):
    log = tmp_path / "log"
    other = hold_lock("shared-work", tmp_path / "made", log)
    with cache_lock("shared-work"):
        assert log.read_text() == "held\nreleased\n"
        assert (tmp_path / "made").is_file()
    assert other.wait(timeout=60) == 0


def test_a_cache_that_takes_no_lock_file_still_runs_the_block(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GRADER_CACHE", str(blocker / "cache"))  # below a file: no folder can be made there
    ran = []
    with cache_lock("anything"):
        ran.append(True)
    assert ran == [True]


def test_call_times_made_by_another_process_meanwhile_are_read_not_measured(own_cache, tmp_path, monkeypatch):
    from grader.pipeline import run

    task = all_tasks()[TASK]
    base = BuiltBase(TASK, tmp_path / "base", "0" * 40, "recipe-key")
    path = run.record_path(task, base, False, True)

    def measure(*args, **kwargs):
        raise AssertionError("measured again what another process had just measured")

    monkeypatch.setattr(run, "measure_call_times", measure)
    other = hold_lock(f"call-budgets-{path.stem}", path, tmp_path / "log")
    assert run.ensure_call_times(task, base, False, launcher=None) == path
    assert other.wait(timeout=60) == 0


class StubBases:
    def get(self, task):
        return BuiltBase(task.id, Path("/nonexistent"), "0" * 40, "recipe-key")


def test_a_control_passed_by_another_process_meanwhile_is_not_graded_again(own_cache, tmp_path):
    from grader.drive.controls import REFERENCE_DIR, Controls, designed_reference

    task = all_tasks()[TASK]

    def grade(*args, **kwargs):
        raise AssertionError("graded a control that another process had just passed")

    controls = Controls(StubBases(), GradingOptions(gpu=False), grade)
    diff = (REFERENCE_DIR / f"{task.id}.diff").read_text(encoding="utf-8", errors="replace")
    key = controls.key(task, diff, designed_reference(task, False))
    other = hold_lock(f"control-{key}", own_cache / "controls" / key, tmp_path / "log")
    assert controls.problem(task) is None
    assert other.wait(timeout=60) == 0


def test_a_ray_actor_refuses_a_candidate_whose_control_fails_on_its_node(monkeypatch):
    from grader.drive import one_candidate
    from grader.drive import ray_backend
    from grader.drive.controls import Controls

    graded = []
    monkeypatch.setattr(ray_backend, "node_bases", StubBases)
    monkeypatch.setattr(ray_backend, "warm_launcher", lambda base, gpu: object())
    monkeypatch.setattr(Controls, "problem", lambda self, task: f"the control of {task.id} failed here")
    monkeypatch.setattr(one_candidate, "grade_candidate", lambda *a, **k: graded.append(a) or pytest.fail("graded"))
    candidate = Candidate(f"{TASK}/x", "x.diff", "diff --git a/x b/x\n", TASK)
    options, gpu_assigned = ray_backend.actor_arguments(GradingOptions(gpu=False, controls=True), False)
    result = ray_backend.grade_on_node(candidate, options, gpu_assigned)
    assert result["run_status"] == "environment_error" and result["verdict"] == "error"
    assert "the control of int8-kv-rounding failed here" in result["error"]
    assert graded == []


def tiny_sdist(cache: Path, version: str = "9.9.9") -> tuple[str, dict[str, str]]:
    """A small sdist of ``version`` in the cache's sdists folder (as fetch_sdist keeps it): its sha256 and blobs."""
    import hashlib
    import io
    import tarfile

    folder = cache / "sdists"
    folder.mkdir(parents=True, exist_ok=True)
    files = {"vllm/__init__.py": b"VERSION = 1\n", "vllm/lora/peft_helper.py": b"def f():\n    return 1\n"}
    tarball = folder / f"vllm-{version}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(f"vllm-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    blobs = {rel: hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() for rel, data in files.items()}
    return hashlib.sha256(tarball.read_bytes()).hexdigest(), blobs


def test_two_processes_on_an_empty_cache_build_a_base_once_and_both_use_it(own_cache, tmp_path):
    """Two graders start on one empty cache at once: one builds the base, the other waits and reuses it (no
    second build removes the base from under the first)."""
    sha, blobs = tiny_sdist(own_cache)
    log = tmp_path / "builds"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from grader.pipeline import checkout
        from grader.core.rubric import BaseRecipe
        real_build = checkout._build
        def slow_build(*args):
            with open({str(log)!r}, "a") as f:
                f.write("built\\n")
            time.sleep(1.0)
            return real_build(*args)
        checkout._build = slow_build
        base = checkout.build_base("tiny", BaseRecipe("9.9.9", {sha!r}, None, {blobs!r}))
        print(base.commit, (base.path / "vllm" / "lora" / "peft_helper.py").read_text().strip().splitlines()[0])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert log.read_text() == "built\n"
    assert outputs[0] == outputs[1] and outputs[0].split()[1] == "def"
