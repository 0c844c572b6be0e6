"""How judges are started: a fresh interpreter (cold) or a fork of a warm worker, and what both hand to a judge and
its subjects. Each case runs a tiny pytest file as the judge, in the environment the grader gives a judge, with one
uncontained subject answering a probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from grader.core.records import Candidate, GradingOptions
from grader.core.rubric import REPO_ROOT, all_tasks
from grader.pipeline.run import path_scrubber
from grader.sandbox.launch import ColdLauncher, WarmPool
from grader.core.paths import secret_seed
from grader.sandbox.protocol import SINGLE_THREADED, JudgeRequest, base_environment
from judge_harness import reporting_judge

JUDGE_TEST = """
import json, os, sys
import torch
from grader.sandbox.client import subject

def test_report(request):
    seen = {"judge": {"threads": torch.get_num_threads(), "writes_compiled": not sys.dont_write_bytecode,
                      "plugins": sorted(name for name, _ in request.config.pluginmanager.list_name_plugin()
                                        if name in AUTOLOADED)},
            "subject": subject("candidate").call("report_probe.seen")}
    with open(os.environ["GRADER_EVIDENCE_OUT"] + ".seen", "w") as out:
        json.dump(seen, out)
"""
PROBE = """
import sys
import torch

def seen():
    return {"threads": torch.get_num_threads(), "writes_compiled": not sys.dont_write_bytecode,
            "pytest_loaded": any(name.split(".")[0] in ("pytest", "_pytest") for name in sys.modules)}
"""


# The pytest plugins this environment installs (entry points); the judge loads none of them.
AUTOLOADED = sorted(entry.name for entry in entry_points(group="pytest11"))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_what_a_judge_and_its_subject_are_given(tmp_path, own_cache, warm):
    """Whatever --jobs and the core count, torch in a judge and in its subject runs one intra-op thread: a float
    reduction then splits the same way everywhere, and parallel candidates do not oversubscribe the cores. The
    judge loads no installed pytest plugin, and keeps its compiled (assertion-rewritten) modules under the cache;
    its subject writes no compiled module, and has no pytest loaded (a candidate could tell from it that it is
    being tested), though a warm worker loads pytest for its judges."""
    assert all(base_environment(gpu)[name] == "1" for name in SINGLE_THREADED for gpu in (False, True))
    job, seen = reporting_judge(tmp_path, JUDGE_TEST.replace("AUTOLOADED", repr(AUTOLOADED)),
                                {"report_probe": PROBE})
    launcher = WarmPool(1, base_environment(False), ["torch"]) if warm else ColdLauncher()
    try:
        returncode, timed_out = launcher.run(job)
    finally:
        launcher.close()
    assert (returncode, timed_out) == (0, False), Path(job.log).read_text()[-2000:]
    assert json.loads(seen.read_text()) == {"judge": {"threads": 1, "writes_compiled": True, "plugins": []},
                                            "subject": {"threads": 1, "writes_compiled": False,
                                                        "pytest_loaded": False}}
    assert list((own_cache / "judge-pycache").rglob("test_report*.pyc")), "the rewritten test module was not kept"


WHO_SERVED = """
import json, os

def test_report():
    with open(os.environ["GRADER_EVIDENCE_OUT"] + ".seen", "w") as out:
        json.dump({"worker": os.getppid()}, out)
"""


def _ended(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_pool_starts_its_workers_together_forked_from_one(tmp_path, own_cache):
    """A pool of three starts all three at its first run: one started by the grader, two forked from it after its
    preload. Each serves judges of its own (a judge's parent is its worker), three at once, and all end with the
    pool."""
    jobs = []
    for n in range(3):
        (tmp_path / str(n)).mkdir()
        jobs.append(reporting_judge(tmp_path / str(n), WHO_SERVED, {})[0:2])
    launcher = WarmPool(3, base_environment(False), ["json"])
    try:
        with ThreadPoolExecutor(3) as pool:
            done = list(pool.map(lambda job: launcher.run(job[0]), jobs))
        assert done == [(0, False)] * 3, [Path(job.log).read_text()[-2000:] for job, _ in jobs]
        servers = list(launcher.servers)
        assert len(servers) == 3 and sum(server.proc is not None for server in servers) == 1
        assert len({server.pid for server in servers}) == 3
        served = {json.loads(seen.read_text())["worker"] for _, seen in jobs}
        assert served <= {server.pid for server in servers}
    finally:
        launcher.close()
    assert all(_ended(server.pid) for server in servers)


def test_the_caller_cannot_pass_a_thread_count_through():
    """A thread count in the grader's own environment does not reach judges or subjects."""
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "8"
    try:
        env = base_environment(False, also_pass=("OMP_NUM_THREADS",))
    finally:
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    assert env["OMP_NUM_THREADS"] == "1"


ASK_FOR_THE_SECRET = """
import sys
from grader.core.paths import secret_seed
print("ready", flush=True)
sys.stdin.read(1)
print(secret_seed(), flush=True)
"""


def test_the_judge_secret_is_made_once_whoever_asks_first(tmp_path, monkeypatch):
    """Graders sharing a fresh cache (and the threads of one grader) ask for the secret at the same moment: none
    fails, and all get the same one, private to its owner, with no draft left behind."""
    for round_ in range(4):
        cache = tmp_path / f"cache-{round_}"
        monkeypatch.setenv("GRADER_CACHE", str(cache))
        askers = [subprocess.Popen([sys.executable, "-c", ASK_FOR_THE_SECRET], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT) for _ in range(6)]
        for asker in askers:
            assert asker.stdout.readline().strip() == "ready"
        for asker in askers:  # released together
            asker.stdin.write("x")
            asker.stdin.flush()
        with ThreadPoolExecutor(8) as pool:
            seen = set(pool.map(lambda _: secret_seed(), range(32)))
        seen |= {asker.communicate()[0].strip() for asker in askers}
        assert all(asker.returncode == 0 for asker in askers)
        assert len(seen) == 1 and len(seen.pop()) == 32
        assert (cache / "judge-secret").stat().st_mode & 0o777 == 0o600
        assert [p.name for p in cache.iterdir()] == ["judge-secret"], "a draft was left behind"


def test_temporary_paths_are_scrubbed_even_when_a_repr_cuts_them_short(tmp_path):
    """The same failure graded twice gives the same message, though every grading has its own scratch folder,
    pytest's reprs cut long strings (sometimes inside the folder's random name), and captured vLLM log lines
    carry the time they were written."""
    messages = []
    for _ in range(2):
        scratch = Path(tempfile.mkdtemp(prefix="grader-some-task-", dir=tmp_path))
        tree, base = scratch / "tree-abc", tmp_path / "base"
        scrub = path_scrubber(tree, scratch, base)
        cut = str(scratch)[:-3] + "...ror: name 'x' is not defined"
        logged = f"'stdout_tail': 'INFO 12-01 15:5{len(messages)}:11 [x.py:3] ready\\nWARNING 12-01 15:5{len(messages)}:12.5'"
        messages.append(scrub(f"File \"{tree}/vllm/a.py\" in {base}/vllm: {{'import_error': '{cut}', {logged}}} "
                              "<X at 0x7f3a>"))
    assert messages[0] == messages[1], messages
    assert "<tree>/vllm/a.py" in messages[0] and "<base>/vllm" in messages[0] and "<scratch>..." in messages[0]
    assert "INFO <time> [x.py:3] ready" in messages[0] and "WARNING <time>'" in messages[0]


def test_a_cold_launcher_starts_no_judge_after_an_interrupt(tmp_path):
    """After ``terminate`` (an interrupt) a run returns as killed at once: a traced re-run that would start next
    does not go on behind the interrupt."""
    launcher = ColdLauncher()
    launcher.terminate()
    job = JudgeRequest(["--version"], {}, [], str(tmp_path), str(tmp_path / "judge.log"), 10)
    assert launcher.run(job) == (None, False)
    assert not (tmp_path / "judge.log").exists() and launcher.live == set()


@pytest.mark.parametrize("gpu", [False, True])
def test_gpu_evidence_runs_in_fresh_judges_on_either_backend(monkeypatch, gpu):
    # A warm worker's preload changed what its forked subjects could do with CUDA on the lent H200: GPU evidence is
    # run in fresh judges, locally and in a Ray actor; CPU evidence keeps the warm workers.
    from grader.drive import many_candidates
    from grader.drive import ray_backend

    warm = object()
    monkeypatch.setattr(many_candidates, "preimport_known", lambda base, gpu: True)
    monkeypatch.setattr(many_candidates, "start_warm_pool", lambda *args, **kwargs: warm)
    monkeypatch.setattr("grader.sandbox.launch.start_warm_pool", lambda *args, **kwargs: warm)
    monkeypatch.setattr(ray_backend, "_WARM", {})
    backend = many_candidates.LocalBackend(bases=type("Bases", (), {"get": lambda self, task: None})())
    needing = [Candidate(f"int8-kv-rounding/{n}", f"{n}.diff", "", "int8-kv-rounding") for n in "ab"]
    local = backend.launcher(needing, all_tasks(), GradingOptions(gpu=gpu), many_candidates.QuietObserver())
    actor = ray_backend.warm_launcher(None, gpu)
    for launcher in (local, actor):
        assert isinstance(launcher, ColdLauncher) if gpu else launcher is warm
