"""A result is stored only when the run, the base and the tools were sound (``grader.pipeline.apply.sound_apply``): the tree
must be a whole copy of the base, the base whole afterwards, no apply tool ended by a signal, and an apply failure
is the candidate's only when the task's reference fix applies with the same tools to the same base in the same
run. Otherwise ``UnsoundGround``, an OSError: the candidate's ``environment_error``, never stored.

The property: with a fault injected at a random step (the base removed, a file of it removed, its git objects
removed, the disk filling, an apply tool killed), every run ends with the fault-free result or a named fault,
never another verdict. Units at the apply's steps, on a tiny base, so that 200 runs stay cheap."""

from __future__ import annotations

import errno
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.pipeline import apply
from grader.pipeline.apply import UnsoundGround, sound_apply
from grader.pipeline.checkout import COMMIT_ENV, MANIFEST, git, tree_manifest
from grader.core.records import BuiltBase
from grader.pipeline.diffparse import parse_diff

FILES = {"vllm/__init__.py": "", "vllm/core.py": "".join(f"line {i}\n" for i in range(30)),
         "vllm/util.py": "X = 1\n"}


def edit(path: str, old: str, new: str) -> str:
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,3 +1,3 @@\n"
            f" {old}\n-line 1\n+{new}\n line 2\n")


REFERENCE = edit("vllm/core.py", "line 0", "LINE ONE")
DIFFS = {
    "good": edit("vllm/core.py", "line 0", "line one"),
    "bad": edit("vllm/core.py", "line 0", "line one").replace("-line 1\n", "-no such line\n"),
    "reference": REFERENCE,
}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, str]:
    """A built base (files, git commit) to copy for each run."""
    root = tmp_path_factory.mktemp("template") / "base"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root.parent, "init", "-q", str(root))
    git(root, "add", "-A")
    git(root, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "base", env=COMMIT_ENV)
    return root, git(root, "rev-parse", "HEAD").strip()


def fresh_base(template: tuple[Path, str], where: Path) -> BuiltBase:
    root, commit = template
    subprocess.run(["cp", "-a", str(root), str(where)], check=True)
    (where / ".git" / MANIFEST).write_text(json.dumps(tree_manifest(where)))
    return BuiltBase("tiny", where, commit, "key")


class Faults:
    """Counts the apply's steps and, at step ``at``, injects ``kind``; a fill lasts from then on."""

    STEPS = ("make_tree", "run_tool", "applied_tree", "copy_problem", "base_problem")

    def __init__(self, monkeypatch, base: BuiltBase, kind: str | None, at: int, rng: random.Random) -> None:
        self.base, self.kind, self.at, self.rng = base, kind, at, rng
        self.count = 0
        self.filled = False
        self.killed = False
        for name in self.STEPS:
            monkeypatch.setattr(apply, name, self.wrapped(name, getattr(apply, name)))

    def wrapped(self, name: str, real):
        def step(*args, **kwargs):
            self.count += 1
            if self.count == self.at:
                self.inject()
            if self.filled and name == "make_tree":
                raise OSError(errno.ENOSPC, "No space left on device", str(args[1]))
            if self.filled and name == "run_tool":
                return 1, "error: unable to write file: No space left on device"
            if self.killed and name == "run_tool":
                self.killed = False
                return -9, ""
            return real(*args, **kwargs)
        return step

    def inject(self) -> None:
        base = self.base.path
        if self.kind == "remove-base":
            shutil.rmtree(base, ignore_errors=True)
        elif self.kind == "remove-file":
            (base / self.rng.choice(sorted(FILES))).unlink(missing_ok=True)
        elif self.kind == "remove-objects":
            shutil.rmtree(base / ".git" / "objects", ignore_errors=True)
        elif self.kind == "fill":
            self.filled = True
        elif self.kind == "kill":
            self.killed = True


def one_run(base: BuiltBase, scratch: Path, name: str) -> tuple[str, str | None] | str:
    """(status, tree id) of the candidate ``name`` applied on a tree of ``base``, or "fault: ..." when it raised
    a named fault (an OSError: ``UnsoundGround`` or the copy's own)."""
    scratch.mkdir()
    try:
        tree = apply.make_tree(base, scratch)
        report = sound_apply(base, parse_diff(DIFFS[name]), tree, REFERENCE, contained=False, cut_preview=False)
    except OSError as exc:
        return f"fault: {exc}"
    return report.status, report.tree_id


def test_sound_ground_gives_the_true_results(template, tmp_path):
    got = {name: one_run(fresh_base(template, tmp_path / f"b-{name}"), tmp_path / f"s-{name}", name)
           for name in DIFFS}
    assert got["good"][0] == got["reference"][0] == "applied" and got["good"][1] != got["reference"][1]
    assert got["bad"][0] == "failed" and not got["bad"][1]


def test_a_base_removed_before_its_tree_is_made_is_a_named_fault(template, tmp_path):
    base = fresh_base(template, tmp_path / "base")
    (base.path / "vllm" / "util.py").unlink()
    outcome = one_run(base, tmp_path / "s", "good")
    assert outcome.startswith("fault:") and "not a whole copy" in outcome and "vllm/util.py" in outcome


def test_an_apply_failure_whose_reference_also_fails_is_not_the_candidates(template, tmp_path, monkeypatch):
    base = fresh_base(template, tmp_path / "base")
    monkeypatch.setattr(apply, "run_tool", lambda *a, **k: (1, "error: unable to write: No space left on device"))
    outcome = one_run(base, tmp_path / "s", "bad")
    assert outcome.startswith("fault:") and "reference fix does not apply" in outcome


def test_a_killed_apply_tool_is_a_named_fault(template, tmp_path, monkeypatch):
    base = fresh_base(template, tmp_path / "base")
    monkeypatch.setattr(apply, "run_tool", lambda *a, **k: (-9, ""))
    outcome = one_run(base, tmp_path / "s", "good")
    assert outcome.startswith("fault:") and "ended by a signal" in outcome


@pytest.mark.slow
def test_any_fault_at_any_step_leaves_the_true_result_or_a_named_fault(template, tmp_path, monkeypatch):
    truth = {name: one_run(fresh_base(template, tmp_path / f"tb-{name}"), tmp_path / f"ts-{name}", name)
             for name in DIFFS}
    kinds = ("remove-base", "remove-file", "remove-objects", "fill", "kill")
    seen = {"true": 0, "fault": 0}
    for seed in range(200):
        rng = random.Random(seed)
        name, kind = rng.choice(sorted(DIFFS)), rng.choice(kinds)
        base = fresh_base(template, tmp_path / f"b{seed}")
        with monkeypatch.context() as patch:
            faults = Faults(patch, base, kind, at=rng.randint(1, 12), rng=rng)
            outcome = one_run(base, tmp_path / f"s{seed}", name)
        if isinstance(outcome, str):
            seen["fault"] += 1
        else:
            assert outcome == truth[name], f"seed {seed}: {kind} at step {faults.at} of {name} gave {outcome}"
            seen["true"] += 1
    assert seen["true"] and seen["fault"]  # both ends were reached


def test_a_base_that_loses_a_file_while_its_tree_is_made_is_an_unstored_environment_error(tmp_path, monkeypatch):
    """Through the real pipeline, on a copy of a built base (the shared cache is never touched): the file the
    diff changes vanishes from the base while the candidate's tree is made. Before, the apply failed on it and the
    candidate was stored as ``fail``; now it is ``environment_error``, which no store keeps."""
    from grader.drive import one_candidate
    from grader.pipeline.checkout import is_built
    from grader.core.records import Candidate, GradingOptions
    from grader.core.rubric import all_tasks
    from grader.drive.store import is_final

    task = all_tasks()["int8-kv-rounding"]
    if not is_built(task.id, task.base):
        pytest.skip("the base of int8-kv-rounding is not built in this cache")
    shared = one_candidate.BaseCache().get(task)
    subprocess.run(["cp", "-a", "--reflink=auto", str(shared.path), str(tmp_path / "base")], check=True)
    (tmp_path / "base" / ".git" / MANIFEST).write_text(json.dumps(tree_manifest(tmp_path / "base")))
    copy = BuiltBase(task.id, tmp_path / "base", shared.commit, shared.key)
    monkeypatch.setattr(one_candidate.BaseCache, "build", lambda self, t: copy)
    reference = (Path(apply.REPO_ROOT) / "reference_impl" / f"{task.id}.diff").read_text()
    target = parse_diff(reference).sections[-1].path
    real_make_tree = one_candidate.make_tree

    def losing_make_tree(base, parent):
        (base.path / target).unlink()
        return real_make_tree(base, parent)

    monkeypatch.setattr(one_candidate, "make_tree", losing_make_tree)
    monkeypatch.setenv("GRADER_SCRATCH", str(tmp_path))
    result, _ = one_candidate.grade_candidate(Candidate("c", "c.diff", reference, task.id),
                                              one_candidate.BaseCache(),
                                              GradingOptions(use_evidence_cache=False, contained=False))
    assert (result.verdict, result.run_status) == ("error", "environment_error"), result.summary
    assert "not a whole copy" in result.error and target in result.error
    assert not is_final(result)
