"""grader.core.paths: the one builder of import roots, and the removal of scratch trees."""

from __future__ import annotations

import pytest

from grader.core.paths import make_import_root, remove_tree


def test_an_import_root_holds_only_the_vllm_package_and_its_metadata(tmp_path):
    tree = tmp_path / "tree"
    for name in ("vllm", "vllm.egg-info", "tests", "setup.py"):
        (tree / name).mkdir(parents=True) if "." not in name or name.endswith("info") else (tree / name).touch()
    root = make_import_root(tree, tmp_path / "root")
    assert sorted(p.name for p in root.iterdir()) == ["vllm", "vllm.egg-info"]
    assert (root / "vllm").resolve() == (tree / "vllm").resolve()


def test_a_tree_without_metadata_gets_the_package_alone(tmp_path):
    (tmp_path / "tree" / "vllm").mkdir(parents=True)
    assert [p.name for p in make_import_root(tmp_path / "tree", tmp_path / "root").iterdir()] == ["vllm"]


@pytest.mark.parametrize("with_rm", [True, False], ids=["rm", "no-rm-on-the-path"])
def test_remove_tree_removes_the_folder_and_follows_no_link(tmp_path, monkeypatch, with_rm):
    """A scratch tree goes whole, through ``rm`` or, where the machine has none, through Python; a link in it to a
    folder outside is removed as a link, and what it points to stays."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.txt").write_text("x")
    tree = tmp_path / "scratch"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "file.py").write_text("y")
    (tree / "link").symlink_to(outside)
    if not with_rm:
        monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    remove_tree(tree)
    assert not tree.exists() and (outside / "kept.txt").read_text() == "x"
    remove_tree(tree)  # already gone: nothing to do, nothing raised
