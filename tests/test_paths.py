"""grader.core.paths: the one builder of import roots."""

from __future__ import annotations

from grader.core.paths import make_import_root


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
