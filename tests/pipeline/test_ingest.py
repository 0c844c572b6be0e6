"""Ingestion: the seed bundle, directories of diffs, task inference and unreadable inputs."""

from __future__ import annotations

import json
import re
import pathlib

import pytest

from grader.pipeline.apply import is_cut_header
from grader.pipeline.diffparse import parse_sections
from grader.pipeline.ingest import IngestError, infer_task, ingest, parse_bundle
from grader.core.rubric import all_base_recipes

PREVIEW_LINES = 60
TRITON_MOE = "vllm/model_executor/layers/fused_moe/experts/triton_moe.py"


@pytest.fixture(scope="module")
def seed(request):
    from conftest import SEED

    if not (SEED / "graded-candidates.txt").is_file() or not (SEED / "judge-labels.json").is_file():
        pytest.skip(f"seed bundle not present at {SEED} (it lives outside the repository, in ../shared)")
    candidates = ingest([SEED / "graded-candidates.txt"])
    labels = json.loads((SEED / "judge-labels.json").read_text())["entries"]
    return candidates, labels


def looks_truncated(diff: str) -> bool:
    sections = parse_sections(diff)
    return any(not h.complete for s in sections for h in s.hunks) or bool(sections and is_cut_header(sections[-1]))


def edit_diff(path: str, blob: str | None = "0000000", old: str = "x = 1", new: str = "x = 2") -> str:
    index = f"index {blob}..1111111 100644\n" if blob else ""
    return f"diff --git a/{path} b/{path}\n{index}--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def blob_of(task: str, path: str) -> str:
    return all_base_recipes()[task].blobs[path]


# --- the seed bundle ---------------------------------------------------------------------------------------------


def test_seed_ids_and_count(seed):
    candidates, labels = seed
    assert len(candidates) == len(labels) == 102
    # Ids come from each entry's text (stable under reordering), one per entry; the position is the label.
    # Entries alike in every byte (the same no-diff line) are told apart by a ~N suffix in order.
    assert all(re.fullmatch(r"graded-candidates-[0-9a-f]{10}(~[0-9]+)?", c.id) for c in candidates)
    assert len({c.id for c in candidates}) == 102
    assert [c.bundle_position for c in candidates] == [e["bundle_position"] for e in labels]
    assert all(c.ingest_error is None for c in candidates)


def test_seed_reference_summaries_kept(seed):
    candidates, _ = seed
    with_diff = [c for c in candidates if c.diff]
    assert with_diff and all(c.reference_summary and len(c.reference_summary) > 40 for c in with_diff)
    # A verdict paragraph is prose, never a diff line, and never leaks into the diff.
    for c in with_diff:
        assert not c.reference_summary.startswith(("diff --git", "+", "-", "@@"))
        assert c.reference_summary not in c.diff
        assert c.diff.startswith(("diff --git", "--- "))


def test_seed_no_diff_entries(seed):
    candidates, labels = seed
    empty = {i for i, c in enumerate(candidates) if not c.diff}
    assert empty == {i for i, e in enumerate(labels) if e["overall"] == "no_diff"}
    assert len(empty) >= 10
    for i in empty:
        assert candidates[i].diff == "" and candidates[i].task_reason.startswith("no diff captured (")


def test_seed_every_task_inferred(seed):
    candidates, labels = seed
    wrong = [(c.id, c.task, labels[i]["task"], c.task_reason)
             for i, c in enumerate(candidates) if c.diff and c.task != labels[i]["task"]]
    assert not wrong
    # The seed holds candidates of the seven original tasks; a task added later need not appear in it.
    assert {c.task for c in candidates if c.diff} <= set(all_base_recipes())


def test_seed_whole_diffs_are_not_truncated(seed):
    candidates, _ = seed
    for c in candidates:
        if c.diff and len(c.diff.splitlines()) < PREVIEW_LINES:
            assert not looks_truncated(c.diff), c.id


def test_seed_truncation_detected_only_on_cut_previews(seed):
    candidates, _ = seed
    sizes = {c.id: len(c.diff.splitlines()) for c in candidates if c.diff}
    assert max(sizes.values()) == PREVIEW_LINES
    truncated = {c.id for c in candidates if c.diff and looks_truncated(c.diff)}
    assert truncated and all(sizes[cid] == PREVIEW_LINES for cid in truncated)
    # Every preview cut inside a hunk or a file header is seen as cut (those cut on a hunk's end cannot be).
    for c in candidates:
        if sizes.get(c.id) == PREVIEW_LINES:
            last = c.diff.splitlines()[-1]
            if last.startswith(("diff --git", "index ", "--- ", "new file mode")):
                assert c.id in truncated
    assert len(truncated) >= len([s for s in sizes.values() if s == PREVIEW_LINES]) // 2


def test_seed_trailing_blank_context_line_is_kept(seed):
    """A diff whose last line is a blank context line keeps it (the blank between entries is not part of it)."""
    candidates, _ = seed
    ending_blank = [c for c in candidates if c.diff.endswith("\n \n")]
    assert ending_blank
    for c in candidates:
        assert not c.diff.endswith("\n\n")


def test_seed_task_override(seed):
    from conftest import SEED

    candidates = parse_bundle(SEED / "graded-candidates.txt", task="moe-swap-ab")
    assert len(candidates) == 102
    assert all(c.task == "moe-swap-ab" for c in candidates)
    assert all(c.task_reason == "given" for c in candidates if c.diff)


# --- bundles, synthetic ------------------------------------------------------------------------------------------


def test_small_bundle(tmp_path):
    blob = blob_of("moe-swap-ab", "vllm/model_executor/layers/fused_moe/fused_moe.py")
    diff = edit_diff("vllm/model_executor/layers/fused_moe/fused_moe.py", blob)
    text = ("https://example.org/repo\n\nFirst verdict paragraph, saying it all works.\n\n" + diff +
            "\nno diff captured (empty)\n\nSecond verdict; about a diff whose last line is blank context.\n\n" +
            diff.replace("+x = 2\n", "+x = 2\n \n").replace("@@ -1 +1 @@", "@@ -1,2 +1,2 @@") + "\n")
    path = tmp_path / "mini.txt"
    path.write_text(text)
    candidates = ingest([path])
    assert [c.bundle_position for c in candidates] == [0, 1, 2]
    assert all(re.fullmatch(r"mini-[0-9a-f]{10}", c.id) for c in candidates) and len({c.id for c in candidates}) == 3
    assert candidates[0].reference_summary.startswith("First verdict")
    assert candidates[0].diff == diff and candidates[0].task == "moe-swap-ab"
    assert candidates[1].diff == "" and "empty" in candidates[1].task_reason
    assert candidates[2].diff.endswith("+x = 2\n \n")
    assert not looks_truncated(candidates[2].diff)


# --- directories and single files ---------------------------------------------------------------------------------


def test_directory_ingestion(tmp_path):
    (tmp_path / "in" / "int8-kv-rounding").mkdir(parents=True)
    (tmp_path / "in" / "misc").mkdir()
    # The folder names the task even though the diff's path belongs to another task.
    (tmp_path / "in" / "int8-kv-rounding" / "one.diff").write_text(edit_diff("vllm/utils/flashinfer.py"))
    flat = edit_diff("vllm/utils/flashinfer.py", blob_of("vit-fp8-blackwell", "vllm/utils/flashinfer.py"))
    (tmp_path / "in" / "two.patch").write_text(flat)
    (tmp_path / "in" / "misc" / "three.diff").write_text(edit_diff("tests/kernels/moe/test_moe.py", None))
    (tmp_path / "in" / "notes.txt").write_text("not a diff")
    candidates = ingest([tmp_path / "in"])
    by_id = {c.id: c for c in candidates}
    assert set(by_id) == {"int8-kv-rounding/one", "two", "misc/three"}
    assert (by_id["int8-kv-rounding/one"].task, by_id["int8-kv-rounding/one"].task_reason) == (
        "int8-kv-rounding", "given")
    assert by_id["two"].task == "vit-fp8-blackwell" and "blob" in by_id["two"].task_reason
    assert by_id["misc/three"].task == "moe-swap-ab" and "path" in by_id["misc/three"].task_reason
    assert all(c.source.endswith((".diff", ".patch")) for c in candidates)


def test_directory_task_override(tmp_path):
    (tmp_path / "int8-kv-rounding").mkdir()
    (tmp_path / "int8-kv-rounding" / "a.diff").write_text(edit_diff("x.py"))
    (tmp_path / "b.diff").write_text(edit_diff("tests/kernels/moe/test_moe.py"))
    candidates = ingest([tmp_path], task="minimax-qk-norm")
    assert [c.task for c in candidates] == ["minimax-qk-norm", "minimax-qk-norm"]
    assert all(c.task_reason == "given" for c in candidates)


def test_single_file(tmp_path):
    path = tmp_path / "cand.diff"
    path.write_text(edit_diff("vllm/model_executor/layers/minimax_rms_norm/rms_norm_tp.py"))
    [c] = ingest([path])
    assert (c.id, c.task, c.source) == ("cand", "minimax-qk-norm", str(path))


def test_task_cannot_be_told(tmp_path):
    path = tmp_path / "c.diff"
    path.write_text(edit_diff("README.md", "abcdef0"))
    [c] = ingest([path])
    assert c.task is None and "README.md" in c.task_reason and "known task" in c.task_reason


def test_shared_path_without_blob_is_ambiguous():
    task, reason = infer_task(edit_diff(TRITON_MOE, None))
    assert task is None and "ambiguous" in reason
    assert "fp8-moe-lora" in reason and "rocm-mx-emulation" in reason


@pytest.mark.parametrize("task", ["fp8-moe-lora", "rocm-mx-emulation"])
def test_shared_path_told_apart_by_blob(task):
    assert infer_task(edit_diff(TRITON_MOE, blob_of(task, TRITON_MOE)))[0] == task


def test_referenced_module_decides_when_paths_do_not():
    diff = edit_diff("tests/new_test.py", None, old="pass",
                     new="from vllm.model_executor.layers.minimax_rms_norm.rms_norm_tp import f")
    task, reason = infer_task(diff)
    assert task == "minimax-qk-norm" and "module" in reason


def test_empty_and_proseonly(tmp_path):
    (tmp_path / "e.diff").write_text("")
    (tmp_path / "p.diff").write_text("just words\n")
    by_id = {c.id: c for c in ingest([tmp_path])}
    assert by_id["e"].task is None and by_id["e"].task_reason == "empty diff"
    assert by_id["p"].task is None and by_id["p"].task_reason


def test_non_utf8_bytes_are_data_for_git_not_an_ingest_error(tmp_path):
    """A byte that is not UTF-8 (a raw file name) is kept as it is for git to read (surrogateescape); whether the
    diff applies is the apply step's to say, with its reason."""
    path = tmp_path / "bad.diff"
    path.write_bytes(b"diff --git a/x b/x\n\xff\xfe\x80\n")
    [c] = ingest([path])
    assert c.ingest_error is None
    assert c.diff.encode("utf-8", "surrogateescape") == path.read_bytes()


def test_unreadable_file(tmp_path, monkeypatch):
    path = tmp_path / "locked.diff"
    path.write_text(edit_diff("x.py"))
    path.chmod(0)
    real_open = pathlib.Path.open

    def guarded_open(self, *args, **kwargs):  # root reads mode-000 files; refuse as an ordinary user would be
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", guarded_open)
    [c] = ingest([tmp_path])
    assert c.ingest_error and str(path) in c.ingest_error and "ermission" in c.ingest_error


def test_crlf_diff_file_keeps_its_bytes(tmp_path):
    text = edit_diff("x.py", None, old="x = 1\r", new="x = 2\r")
    path = tmp_path / "crlf.diff"
    path.write_bytes(text.encode())
    [c] = ingest([path])
    assert c.diff == text


def test_missing_path_raises(tmp_path):
    with pytest.raises(IngestError, match="no such file"):
        ingest([tmp_path / "absent.diff"])


def test_duplicate_ids_are_suffixed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "same.diff").write_text(edit_diff("x.py"))
    single = tmp_path / "a" / "same.diff"
    candidates = ingest([tmp_path / "a", tmp_path / "b", single])
    ids = [c.id for c in candidates]
    assert ids == ["same", "same~2", "same~3"]
    assert len(set(ids)) == len(ids)
