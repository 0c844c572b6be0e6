"""The judge/subject contract (``grader.sandbox.protocol``): specs survive JSON unchanged, a judge's folder is set
up one way for grading and for check-task, and every ``GRADER_*`` name the grader reads is one of its constants."""

from __future__ import annotations

import json
import re
from pathlib import Path

from grader.core.rubric import REPO_ROOT
from grader.sandbox import protocol
from grader.sandbox.protocol import (JudgeRequest, SandboxSpec, ScratchSpec, SubjectSpec, load_subjects,
                                     set_up_judge)

BOX = SandboxSpec(memory_bytes=8 << 30, cpu_s=1200, as_bytes=32 << 30, fsize_bytes=1 << 30, nofile=1024, nproc=512,
                  net=True, private_tmp=True, ipc=True, pid=True, binds=(("/usr", "ro"), ("/tree", "ro")),
                  hidden=("/root/.cache/grader",), parent=4242, uid=420_001,
                  scratch=ScratchSpec("/scratch/home", 420_001, 1 << 30, 65536), cgroup="/sys/fs/cgroup/x",
                  memory_cgroup=None, gpu_memory_bytes=40 << 30)


def test_a_sandbox_spec_round_trips_through_json():
    for box in (BOX, SandboxSpec(memory_bytes=1, cpu_s=2, as_bytes=3, fsize_bytes=4, nofile=5, nproc=None, net=False,
                                 private_tmp=False, ipc=False, pid=False, binds=(), hidden=(), parent=1)):
        assert SandboxSpec.from_json(json.loads(json.dumps(box.to_json()))) == box


def test_a_sandbox_spec_is_what_contain_reads():
    """Keys left out where None (contain asks ``spec.get``), binds as [path, mode] pairs."""
    data = BOX.to_json()
    assert "memory_cgroup" not in data and data["binds"] == [["/usr", "ro"], ["/tree", "ro"]]
    assert data["scratch"] == {"path": "/scratch/home", "uid": 420_001, "bytes": 1 << 30, "inodes": 65536}


def test_a_subject_spec_round_trips_through_json(tmp_path):
    spec = SubjectSpec("candidate", BOX, {"HOME": "/h", protocol.GPU: "0"}, ("/root", "/probes"), ("/usr/lib",), "/h",
                       "/h/subject.log", {"/root/vllm/x.py": [3, 4]})
    bare = SubjectSpec("base", None, {}, (), (), "/", "/log")
    for each in (spec, bare):
        assert SubjectSpec.from_json(json.loads(json.dumps(each.to_json()))) == each
    (tmp_path / "subjects.json").write_text(json.dumps({"candidate": spec.to_json(), "base": bare.to_json()}))
    assert load_subjects(tmp_path / "subjects.json") == {"candidate": spec, "base": bare}


def test_a_judge_request_round_trips_through_json():
    request = JudgeRequest(["-p", "x", "tests"], {protocol.SECRET: "s"}, ["/a"], "/cwd", "/log", 12.5)
    assert JudgeRequest.from_json(json.loads(json.dumps(request.to_json()))) == request


def test_a_judge_folder_holds_its_subjects_an_empty_evidence_file_and_the_runs_variables(tmp_path, own_cache):
    judge = tmp_path / "judge"
    judge.mkdir()
    spec = SubjectSpec("candidate", None, {}, ("/root",), (), "/h", "/h/log")
    folder = set_up_judge(judge, ["tests"], "/cwd", tmp_path / "tree", tmp_path / "base", False, 60,
                          {"candidate": spec}, extra_env={protocol.CALL_BUDGETS: "/budgets.json"})
    env = folder.request.env
    assert load_subjects(env[protocol.SUBJECTS]) == {"candidate": spec}
    assert folder.evidence == Path(env[protocol.EVIDENCE_OUT]) and folder.evidence.read_text() == ""
    assert env[protocol.VLLM_TREE] == str(tmp_path / "tree") and env[protocol.GPU] == "0"
    assert env[protocol.CALL_BUDGETS] == "/budgets.json" and folder.request.argv == ["tests"]
    assert folder.request.log == str(folder.log) and folder.log.parent == judge


def test_every_grader_variable_the_engine_names_is_a_protocol_constant():
    """No ``"GRADER_..."`` literal in the engine outside the three modules that define a name (protocol, and the two
    below it that it lists); every name the rubrics' judge-side helpers read is one of ``VARIABLES``."""
    literal = re.compile(r"""["'](GRADER_[A-Z0-9_]+)["']""")
    defining = {"grader/sandbox/protocol.py", "grader/core/paths.py", "grader/sandbox/contain.py"}
    found = {}
    for path in sorted((REPO_ROOT / "grader").rglob("*.py")):
        names = literal.findall(path.read_text())
        if names and path.relative_to(REPO_ROOT).as_posix() not in defining:
            found[path.name] = names
    assert found == {}
    spelled = {name for path in (REPO_ROOT / "rubrics").rglob("*.py") for name in literal.findall(path.read_text())}
    assert spelled and spelled <= set(protocol.VARIABLES)
    assert len(set(protocol.VARIABLES)) == len(protocol.VARIABLES)
