"""Subjects on a platform the rubric declares (``[platforms.NAME]``): what such a subject can import and sees in its
environment, from a cold judge and from a warm worker, and how the rubric declares one. Each judge runs a tiny
pytest file whose one test asks a probe in the machine's subject and in the platform's."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from grader.core.rubric import RubricError, SubjectPlatform, load_task
from grader.sandbox.launch import ColdLauncher, WarmPool
from grader.sandbox.protocol import JudgeRequest, base_environment
from judge_harness import reporting_judge

# Standard-library modules the grader itself never imports: one the platform makes unimportable, the extension
# module that importing it loads (under another name, so a process that ever imported the first still holds it),
# and one that a warm worker preloads besides.
BLOCKED, LOADED_BY_BLOCKED, PRELOADED = "sqlite3", "_sqlite3", "colorsys"
PLATFORM = SubjectPlatform("no-sqlite", unimportable=(BLOCKED,), env=(("PLATFORM_MARK", "on"),),
                           unset=("TRITON_INTERPRET",))

JUDGE_TEST = """
import json, os
import pytest
from grader.sandbox.client import subject

def test_report():
    seen = {"machine": subject("candidate").call("platform_probe.seen"),
            "platform": subject("candidate", platform="no-sqlite").call("platform_probe.seen")}
    with pytest.raises(RuntimeError, match="no zygote on the platform"):
        subject("candidate", platform="undeclared").call("platform_probe.seen")
    with open(os.environ["GRADER_EVIDENCE_OUT"] + ".seen", "w") as out:
        json.dump(seen, out)
"""
PROBE = f"""
import importlib, os, sys

def seen():
    held = {LOADED_BY_BLOCKED!r} in sys.modules
    try:
        importlib.import_module({BLOCKED!r})
        importable = True
    except ImportError:
        importable = False
    return {{"importable": importable, "held_before": held, "preloaded": {PRELOADED!r} in sys.modules,
             "mark": os.environ.get("PLATFORM_MARK"), "interpret": os.environ.get("TRITON_INTERPRET"),
             "pid": os.getpid()}}
"""


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_subject_on_a_platform_never_held_what_it_makes_unimportable(tmp_path, own_cache, warm):
    """On the platform the module cannot be imported and was never loaded in the process (a warm worker preloads
    it, yet its platform template was forked before that preload); the platform's variables are set and unset. The
    machine's own subject of the same run is untouched, and a platform the run does not have is an error. A warm
    pool of two serves the runs in turn: its first worker, then the one forked from it (with a pristine zygote of
    its own), then the first again, reusing the platform's template."""
    job, seen_file = reporting_judge(tmp_path, JUDGE_TEST, {"platform_probe": PROBE}, (PLATFORM,))
    launcher = WarmPool(2, base_environment(False), [BLOCKED, PRELOADED]) if warm else ColdLauncher()
    try:
        for _ in range(3):
            seen_file.unlink(missing_ok=True)
            returncode, timed_out = launcher.run(job)
            assert (returncode, timed_out) == (0, False), Path(job.log).read_text()[-3000:]
            seen = json.loads(seen_file.read_text())
            assert seen["platform"] | {"pid": 0} == {"importable": False, "held_before": False, "preloaded": warm,
                                                     "mark": "on", "interpret": None, "pid": 0}
            assert seen["machine"] | {"pid": 0} == {"importable": True, "held_before": warm, "preloaded": warm,
                                                    "mark": None, "interpret": "1", "pid": 0}
            assert seen["platform"]["pid"] != seen["machine"]["pid"]
    finally:
        launcher.close()


def test_a_judge_request_keeps_its_platforms_through_json():
    request = JudgeRequest(["x"], {"A": "1"}, [], "/", "/log", 10.0, (PLATFORM,))
    assert JudgeRequest.from_json(json.loads(json.dumps(request.to_json()))) == request


def write_task(folder: Path, platforms: str) -> Path:
    """A copy of the int8-kv-rounding task folder's rubric and base recipe with ``platforms`` appended."""
    source = Path(__file__).resolve().parents[2] / "rubrics" / "int8-kv-rounding"
    task = folder / "int8-kv-rounding"
    task.mkdir()
    (task / "base.toml").write_text((source / "base.toml").read_text())
    (task / "rubric.toml").write_text((source / "rubric.toml").read_text() + "\n" + textwrap.dedent(platforms))
    for overlay in source.glob("*.overlay.diff"):
        (task / overlay.name).write_bytes(overlay.read_bytes())
    return task


def test_the_rubric_declares_its_platforms(tmp_path):
    task = load_task(write_task(tmp_path, """
        [platforms.without-triton]
        unimportable = ["triton"]
        env = { TORCHDYNAMO_DISABLE = "1" }
        unset = ["TRITON_INTERPRET"]
    """))
    assert task.platforms == {"without-triton": SubjectPlatform("without-triton", ("triton",),
                                                                (("TORCHDYNAMO_DISABLE", "1"),), ("TRITON_INTERPRET",))}


@pytest.mark.parametrize("table,complaint", [
    ('[platforms.Bad_Name]\nunset = ["X"]', "lower-case letters"),
    ('[platforms.p]\nunimportable = "triton"', "must be a list"),
    ('[platforms.p]\nunimportable = ["not a module"]', "module names"),
    ('[platforms.p]\nenv = { X = 1 }', "strings"),
    ('[platforms.p]\nunset = ["FINE"]\nenv = { "not a name" = "1" }', r"platforms\.p\.env: must name environment"),
    ('[platforms.p]\nwhatever = ["x"]', "unknown key"),
    ("[platforms.p]", "makes something unimportable"),
])
def test_a_malformed_platform_is_refused_with_its_line(tmp_path, table, complaint):
    with pytest.raises(RubricError, match=complaint) as refused:
        load_task(write_task(tmp_path, table))
    assert "rubric.toml:" in str(refused.value)
