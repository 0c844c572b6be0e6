"""Tamper signals (grader/pipeline/integrity.py): honest diffs raise none, every attack diff of the project raises the
rules it should, each rule fires on what it names and not on its honest look-alikes, and the flags reach
results.json, the pages and the exit code without touching a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import cli
from grader.drive import commands
from grader.core.records import Candidate, CandidateResult, IntegrityFlag
from grader.core.rubric import REPO_ROOT
from grader.pipeline.integrity import RULES, scan_diff
from grader.core.records import GradingOptions
from grader.drive.one_candidate import BaseCache, grade_candidate
from grader.reports.report import grader_revision, started_at, write_html, write_results_json

from conftest import run_info


def added_file(path: str, *lines: str) -> str:
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


def rules_of(diff: str) -> set[str]:
    return {flag.rule for flag in scan_diff(diff)}


HONEST = sorted([*(REPO_ROOT / "reference_impl").glob("*.diff"), *(REPO_ROOT / "candidates").glob("*/*.diff")])


@pytest.mark.parametrize("path", HONEST, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_reference_fixes_and_samples_raise_no_flag(path):
    assert scan_diff(path.read_text()) == []


# The project's attack diffs (tests/adversarial/) and what each must raise; the three without a rule are attacks on
# resources or paths, stopped by the sandbox and apply, with nothing in their text an honest fix would not write.
ADVERSARIAL = {"escape.diff": {"socket", "fork", "signal", "process-exit"},
               "self-executing.diff": {"process-exit", "harness-import", "foreign-replacement"},
               "pytest-forgery.diff": {"harness-import", "foreign-replacement"},
               "import-loop.diff": set(), "memory-hog.diff": set(), "path-traversal.diff": set()}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_each_attack_diff_raises_its_rules(name):
    assert rules_of((REPO_ROOT / "tests" / "adversarial" / name).read_text()) == ADVERSARIAL[name]


# One line that must raise the rule, one honest look-alike that must not.
RULE_CASES = {
    "grader-environment": ('secret = os.environ["GRADER_SECRET"]', 'level = os.environ.get("VLLM_LOGGING_LEVEL")'),
    "frame-walk": ("caller = sys._getframe(1).f_locals", "frame_count = len(frames)"),
    "gc-walk": ("for obj in gc.get_objects():", "gc.collect()"),
    "harness-lookup": ('plugin = sys.modules.get("grader.pipeline.pytest_evidence")', 'mod = sys.modules.get("vllm.envs")'),
    "harness-import": ("from _pytest.reports import TestReport", "from vllm.platforms import current_platform"),
    "proc-filesystem": ('open("/proc/1/environ").read()', 'path = "procs/a.txt"'),
    "ptrace": ("libc.ptrace(PTRACE_ATTACH, pid, 0, 0)", "trace = []"),
    "socket": ("s = socket.socket(socket.AF_UNIX)", "sockets_per_node = 2"),
    "ctypes": ("import ctypes", "ctype = 'int'"),
    "fork": ("pid = os.fork()", "forked = False"),
    "signal": ("signal.signal(signal.SIGALRM, handler)", "signal_name = 'x'"),
    "process-exit": ("os._exit(0)", "sys.exit_code = 0 if ok else 1"),
    "foreign-replacement": ("torch.testing.assert_close = lambda *a, **k: None", "torch.testing.assert_close(a, b)"),
}


def test_every_rule_has_a_case():
    assert set(RULE_CASES) == {rule.id for rule in RULES}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_rule_fires_on_its_pattern_and_not_on_its_look_alike(rule):
    flagged, honest = RULE_CASES[rule]
    assert rule in rules_of(added_file("vllm/x.py", flagged))
    assert rule not in rules_of(added_file("vllm/x.py", honest))


@pytest.mark.parametrize("line", ["time.perf_counter = lambda: 0.0", "builtins.print = forged",
                                  "setattr(torch, 'allclose', always)", "torch.Tensor.__eq__ = eq"])
def test_replacing_functions_of_foreign_modules_is_flagged(line):
    assert "foreign-replacement" in rules_of(added_file("vllm/x.py", line))


def test_a_flag_says_where_what_and_why_with_the_text_cleaned():
    diff = ("diff --git a/vllm/a.py b/vllm/a.py\n--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -10,3 +10,4 @@\n ctx\n"
            "-old\n+import sys\n+f = sys._getframe(2)  # \x1b[2J\n ctx\n")
    [flag] = scan_diff(diff)
    assert (flag.rule, flag.file, flag.line) == ("frame-walk", "vllm/a.py", 12)
    assert "\x1b" not in flag.text and "\\x1b[2J" in flag.text and flag.why


def test_comments_and_the_tests_own_pytest_imports_are_not_flagged():
    assert scan_diff(added_file("vllm/x.py", "# sys._getframe is not used here")) == []
    assert scan_diff(added_file("tests/test_x.py", "import pytest", "from _pytest.python import Function")) == []
    assert rules_of(added_file("vllm/x.py", "import pytest")) == {"harness-import"}


def test_a_neutralised_file_is_scanned_too():
    assert rules_of(added_file("conftest.py", "import os", "os._exit(0)")) == {"process-exit"}


def test_flags_reach_the_result_and_decide_nothing(tmp_path):
    diff = added_file("vllm/x.py", "import ctypes")
    candidate = Candidate("flagged", "x.diff", diff, task=None, task_reason="no task here")
    result, _ = grade_candidate(candidate, BaseCache(), GradingOptions(use_evidence_cache=False))
    assert result.verdict == "no_task" and [f.rule for f in result.integrity_flags] == ["ctypes"]
    assert result.to_json()["integrity_flags"][0]["file"] == "vllm/x.py"
    import jsonschema

    run = run_info(grader=grader_revision(), started_at=started_at())
    doc = json.loads(write_results_json(tmp_path, [result], run).read_text())
    jsonschema.validate(doc, json.loads((REPO_ROOT / "grader" / "schema" / "results.schema.json").read_text()))
    write_html(tmp_path, [result], run, {"flagged": diff})
    assert "&#9873; 1" in (tmp_path / "index.html").read_text()
    [page] = (tmp_path / "candidates").glob("*.html")
    assert "Tamper signals (1)" in page.read_text() and "import ctypes" in page.read_text()


def test_fail_on_flags_exits_5_only_when_nothing_else_failed():
    flag = IntegrityFlag("ctypes", "vllm/x.py", 1, "import ctypes", "loads native code")
    flagged = [CandidateResult("a", None, "a.diff", "full", 1.0, {}, None, "", integrity_flags=[flag])]
    clean = [CandidateResult("b", None, "b.diff", "full", 1.0, {}, None, "")]
    assert commands.flags_exit(flagged, 0, "0: fine")[0] == 5 and "a" in commands.flags_exit(flagged, 0, "0")[1]
    assert commands.flags_exit(clean, 0, "0: fine") == (0, "0: fine")
    args = cli.build_parser().parse_args(["grade", "x.diff", "--fail-on-flags"])
    assert args.fail_on_flags


def test_the_frame_walk_of_the_secret_attack_is_flagged():
    """The first class of issue 25: a candidate that walks sys._getframe() up to the judge's request."""
    diff = added_file("vllm/__init__.py", "import sys", "frame = sys._getframe()", "while frame is not None:",
                      "    secret = frame.f_locals.get('request')", "    frame = frame.f_back")
    assert rules_of(diff) == {"frame-walk"}
    assert len(scan_diff(diff)) == 3


# The spellings a line pattern misses and the syntax tree resolves (issue 49): aliases, ``from`` imports, split
# strings, a name bound on one line and used on the next, look-alike (NFKC) identifiers; each with its rule.
RESOLVED = {
    "module alias": (["import os as o", "o._exit(0)"], "process-exit", 2),
    "from import": (["from os import _exit", "_exit(0)"], "process-exit", 2),
    "from import alias": (["from os import _exit as leave", "leave(0)"], "process-exit", 2),
    "name bound then used": (["import os", "leave = os._exit", "leave(0)"], "process-exit", 3),
    "module bound to a name": (["import sys", "s = sys", "frame = s._getframe(1)"], "frame-walk", 3),
    "split string import": (['lib = __import__("ct" + "ypes")'], "ctypes", 1),
    "import_module of a folded name": (["import importlib", 'name = "soc" "ket"', "part = name",
                                        "m = importlib.import_module(part)"], "socket", 4),
    "getattr with a split name": (["import os", 'getattr(os, "_ex" + "it")(0)'], "process-exit", 2),
    "split environment name": (['key = "GRA" + "DER_SECRET"'], "grader-environment", 1),
    "f-string path": (['pid = 1', 'open(f"/pr{\'oc\'}/1/environ")'], "proc-filesystem", 2),
    "joined path": (['path = "/".join(["", "proc", "self", "maps"])'], "proc-filesystem", 1),
    "look-alike identifier": (["import os", "\uff4f\uff53._exit(0)"], "process-exit", 2),
    "look-alike module import": (["import \uff43types"], "ctypes", 1),
    "harness via sys.modules and a folded key": (["import sys", 'key = "gra" + "der.pytest_evidence"',
                                                  "plugin = sys.modules[key]"], "harness-lookup", 3),
    "foreign replacement through an alias": (["import torch.testing as tt", "tt.assert_close = print"],
                                             "foreign-replacement", 2),
    "foreign replacement through vars()": (["import torch", 'vars(torch)["allclose"] = print'],
                                           "foreign-replacement", 2),
    "setattr on a from-imported module": (["from torch import testing", 'setattr(testing, "assert_close", print)'],
                                          "foreign-replacement", 2),
    "signal through an alias": (["import signal as s", "s.alarm(1)"], "signal", 2),
    "fork through getattr on a bound module": (["import os", "m = os", 'getattr(m, "fo" + "rk")()'], "fork", 3),
}


@pytest.mark.parametrize("case", sorted(RESOLVED))
def test_a_resolved_spelling_raises_its_rule_on_the_line_that_uses_it(case):
    lines, rule, line = RESOLVED[case]
    flags = scan_diff(added_file("vllm/x.py", *lines))
    assert (rule, line) in {(flag.rule, flag.line) for flag in flags}, flags


def test_a_binding_in_context_lines_reaches_an_added_use():
    diff = ("diff --git a/vllm/a.py b/vllm/a.py\n--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,3 +1,4 @@\n"
            " import os as system\n x = 1\n+system._exit(3)\n y = 2\n")
    assert [(flag.rule, flag.line) for flag in scan_diff(diff)] == [("process-exit", 3)]


def test_resolution_does_not_flag_honest_code_that_looks_alike():
    honest = ["import os", "path = os.path.join('a', 'b')", "exit_code = 0", "name = 'proc' + 'ess'",
              "import torch", "x = torch.testing.assert_close", "x(a, b)", "self.signal = None",
              "frame_count = len(frames)", "value = getattr(config, 'fork_mode', None)"]
    assert scan_diff(added_file("vllm/x.py", *honest)) == []


@pytest.mark.parametrize("body", [
    ['x = "a"' + ' + "a"' * 200_000],                                    # a chain deeper than any parser keeps
    ["x = 'ab'"] + [f"x = x + x" for _ in range(64)] + ["y = x + '/proc/'"],  # a string doubling 64 times
    ["x = " + "(" * 150 + "1" + ")" * 150],
])
def test_the_syntax_tree_scan_has_a_budget(body):
    """A crafted chain cannot make the scan spin or grow without bound: it ends, with the budget flag where it
    stopped early (the folded-string cap keeps the doubling small, so that one just ends)."""
    flags = scan_diff(added_file("vllm/x.py", *body))
    assert all(flag.rule in {"scan-budget", "proc-filesystem"} for flag in flags)
