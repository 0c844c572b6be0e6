"""One identity for every cache and store key (grader.core.identity).

A change to any engine module that can shape a verdict changes every key, so a rerun into the same ``--out`` and
the same cache grades again; evidence or results of an uncontained run are never served to a contained one; the
engine's modules come from the import graph, so a renamed or missing module cannot drop out of the key unnoticed.
The end-to-end tests grade one int8-kv-rounding sample (the fastest hidden suite) through the orchestrator.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.core import identity
from grader.core.identity import IdentityError, engine_files, engine_fingerprint, grading_identity
from grader.core.rubric import RUBRICS_DIR, all_tasks, load_task
from grader.pipeline.ingest import ingest
from grader.core.records import GradingOptions
from grader.drive.many_candidates import grade_many
from grader.drive.store import ResultStore, cache_key

REPO = Path(__file__).resolve().parents[2]
TASK = "int8-kv-rounding"
SAMPLE = REPO / "candidates" / TASK / "plus-half-truncate.diff"
# One module of each kind the acceptance names: scoring, summaries, applying, running, the sandbox.
VERDICT_SHAPING = ["grader/pipeline/score.py", "grader/reports/summarize.py", "grader/pipeline/apply.py", "grader/pipeline/run.py",
                   "grader/sandbox/contain.py", "grader/sandbox/subject.py", "grader/sandbox/judge.py",
                   "grader/pipeline/pytest_evidence.py"]


@pytest.fixture(autouse=True)
def fresh_fingerprint():
    engine_fingerprint.cache_clear()
    yield
    engine_fingerprint.cache_clear()


def changed_source(monkeypatch, relative: str) -> None:
    """Make the engine fingerprint read ``relative`` as if it had been edited (the repository is not touched)."""
    real = identity.module_source
    target = (REPO / relative).resolve()
    monkeypatch.setattr(identity, "module_source",
                        lambda path: real(path) + (b"\n# edited\n" if Path(path).resolve() == target else b""))
    engine_fingerprint.cache_clear()


def test_the_engine_is_the_import_graph_of_the_pipeline():
    files = {p.resolve().relative_to(REPO).as_posix() for p in engine_files(REPO).values()}
    for relative in [*VERDICT_SHAPING, "grader/sandbox/zygote.py", "grader/sandbox/forkserver.py",
                     "grader/sandbox/channel.py", "grader/reports/describe.py", "grader/templates/summary.txt.j2"]:
        assert relative in files, relative
    # Modules that only present results are not part of it.
    assert "grader/reports/terminal.py" not in files and "grader/cli.py" not in files


@pytest.mark.parametrize("relative", VERDICT_SHAPING)
def test_editing_a_verdict_shaping_module_changes_every_key(monkeypatch, relative):
    task = all_tasks()[TASK]
    [candidate] = ingest([SAMPLE])
    before = (cache_key(candidate, task, False, True), grading_identity(task, False, True).key("evidence", "tree"))
    changed_source(monkeypatch, relative)
    after = (cache_key(candidate, task, False, True), grading_identity(task, False, True).key("evidence", "tree"))
    assert before[0] != after[0] and before[1] != after[1]


def test_containment_is_part_of_every_key():
    task = all_tasks()[TASK]
    [candidate] = ingest([SAMPLE])
    assert cache_key(candidate, task, False, True) != cache_key(candidate, task, False, False)
    assert grading_identity(task, False, True).key("evidence", "t") != \
        grading_identity(task, False, False).key("evidence", "t")


def engine_copy(tmp_path: Path) -> Path:
    root = tmp_path / "engine"
    shutil.copytree(REPO / "grader", root / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_a_renamed_engine_module_changes_the_key(tmp_path):
    root = engine_copy(tmp_path)
    before = engine_fingerprint(root)
    (root / "grader" / "pipeline" / "score.py").rename(root / "grader" / "pipeline" / "scoring.py")
    for path in (root / "grader").rglob("*.py"):
        text = path.read_text()
        if "grader.pipeline.score " in text or "grader.pipeline.score\n" in text:
            path.write_text(text.replace("grader.pipeline.score ", "grader.pipeline.scoring ").replace("grader.pipeline.score\n", "grader.pipeline.scoring\n"))
    engine_fingerprint.cache_clear()
    renamed = engine_files(root)
    assert "grader.pipeline.scoring" in renamed and "grader.pipeline.score" not in renamed
    assert engine_fingerprint(root) != before


def test_a_missing_engine_module_is_an_error_not_empty_bytes(tmp_path):
    root = engine_copy(tmp_path)
    (root / "grader" / "reports" / "summarize.py").unlink()
    with pytest.raises(IdentityError, match="grader.reports.summarize"):
        engine_fingerprint(root)


# ------------------------------------------------------------------------------------- through the orchestrator


def grade_once(out: Path, contained: bool = True):
    [candidate] = ingest([SAMPLE])
    run = grade_many([candidate], GradingOptions(timeout=300, cold=True, contained=contained),
                     store=ResultStore(out))
    [graded] = run.graded
    return graded


@pytest.mark.slow
@pytest.mark.parametrize("relative", ["grader/pipeline/score.py", "grader/sandbox/subject.py"])
def test_a_changed_engine_regrades_into_the_same_out_and_cache(tmp_path, private_cache, monkeypatch, relative):
    out = tmp_path / "out"
    first = grade_once(out)
    assert not first.stored and first.result.run_status == "complete"
    assert grade_once(out).stored  # unchanged engine: the stored result
    changed_source(monkeypatch, relative)
    again = grade_once(out)
    assert not again.stored, "a result graded by another engine was replayed"
    assert "evidence_cached" not in again.result.timings, "evidence of another engine was reused"
    assert again.result.rubric.engine != first.result.rubric.engine


@pytest.mark.slow
def test_uncontained_evidence_is_never_served_to_a_contained_run(tmp_path, private_cache):
    out = tmp_path / "out"
    uncontained = grade_once(out, contained=False)
    assert uncontained.result.run_status == "complete"
    contained = grade_once(out, contained=True)
    assert not contained.stored, "a result of an uncontained run was replayed to a contained one"
    assert "evidence_cached" not in contained.result.timings, "uncontained evidence reused"
    fresh = grade_once(tmp_path / "fresh", contained=True)  # a fresh --out, the same cache
    # The contained run's own evidence is reused: the cache still works within one containment.
    assert not fresh.stored and fresh.result.timings.get("evidence_cached") == 1.0


def test_the_judge_secret_is_in_every_key_as_a_digest(tmp_path, monkeypatch):
    """Evidence, stored results and call budgets drawn under one secret are never replayed under another."""
    task = load_task(RUBRICS_DIR / "xpu-kv-cache-dtypes")
    keys = []
    for secret in ("one", "two"):
        cache = tmp_path / secret
        cache.mkdir()
        (cache / "judge-secret").write_text(secret)
        monkeypatch.setenv("GRADER_CACHE", str(cache))
        identity = grading_identity(task, False, True)
        assert secret not in identity.secret
        keys.append(identity.key("evidence", "tree"))
    assert keys[0] != keys[1]


@pytest.mark.parametrize("relative", ["tests", "probes"])
def test_editing_a_hidden_test_or_probe_without_a_version_bump_changes_the_key(tmp_path, relative):
    """A rubric's tests and probes decide its evidence: an edit that keeps the rubric's version is still a new
    identity, so nothing graded before the edit is replayed after it."""
    folder = tmp_path / "int8-kv-rounding"
    shutil.copytree(RUBRICS_DIR / "int8-kv-rounding", folder, symlinks=True)
    before = grading_identity(load_task(folder), gpu=False, contained=True).key("result", "diff")
    edited = sorted(p for p in (folder / relative).rglob("*.py") if not p.is_symlink())[0]
    edited.write_text(edited.read_text() + "\n# an edit that keeps the version\n")
    after = grading_identity(load_task(folder), gpu=False, contained=True).key("result", "diff")
    assert before != after, f"editing {edited.relative_to(folder)} kept the identity"
