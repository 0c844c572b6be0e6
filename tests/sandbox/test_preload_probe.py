"""The warm workers' preload list: what importing a base's vLLM modules pulls in from outside vLLM, probed the way a
subject imports them (after ``subject_setup``'s stand-ins), read from its marked line whatever else vLLM prints,
and never cached when the probe gave no list."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.core.paths import make_import_root
from grader.sandbox import launch
from grader.sandbox.protocol import base_environment


def fake_tree(root: Path, body: str) -> Path:
    """A tree whose ``vllm`` package runs ``body`` when imported."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(textwrap.dedent(body))
    return root


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(launch, "vllm_module_names", lambda tree: ["vllm"])
    return tmp_path / "cache"


def probe(tmp_path: Path, tree: Path) -> list[str]:
    root = tmp_path / f"import-root-{len(list(tmp_path.glob('import-root-*')))}"
    return launch.third_party_modules(make_import_root(tree, root), tree,
                                      base_environment(False), False)


def test_modules_imported_after_the_stand_ins_are_listed(tmp_path, isolated_cache):
    # The stand-ins set GRADER_GPU's meaning for the run: this vLLM imports `wave` only where it sees them, as a
    # real one picks its platform (and so its imports) through them.
    tree = fake_tree(tmp_path / "tree", """
        import sys
        print("INFO 12-03 10:00:00 [logger.py:1] a log line on stdout")
        if "vllm_stand_ins" in sys.modules:
            import wave
        import colorsys
    """)
    modules = probe(tmp_path, tree)
    assert "wave" in modules and "colorsys" in modules
    assert not {"INFO", "subject_setup", "vllm_stand_ins", "vllm"} & set(modules)
    assert launch.preimport_record(tree, base_environment(False)).read_text().split() == modules


def test_a_probe_that_gave_no_list_is_not_cached(tmp_path, isolated_cache, capsys):
    tree = fake_tree(tmp_path / "tree", "import os\nos._exit(3)\n")
    assert probe(tmp_path, tree) == []
    assert "gave no module list (exit status 3)" in capsys.readouterr().err
    assert not launch.preimport_record(tree, base_environment(False)).exists()


def test_modules_without_bytecode_are_named_with_the_command_that_compiles_them(tmp_path, isolated_cache, capsys):
    package = tmp_path / "site" / "fresh_dependency"
    package.mkdir(parents=True)
    # More than a tenth of what the probe finds: the subjects' setup alone imports some hundred modules (Triton's).
    for n in range(200):
        (package / f"part{n}.py").write_text("VALUE = 1\n")
    (package / "__init__.py").write_text("".join(f"from . import part{n}\n" for n in range(200)))
    tree = fake_tree(tmp_path / "tree", f"""
        import sys
        sys.path.insert(0, {str(package.parent)!r})
        import fresh_dependency
    """)
    assert "fresh_dependency.part7" in probe(tmp_path, tree)
    err = capsys.readouterr().err
    assert "have no bytecode" in err and "-m compileall" in err
    # Once compiled, the same probe has nothing to say.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    launch.preimport_record(tree, base_environment(False)).unlink()
    probe(tmp_path, tree)
    assert "have no bytecode" not in capsys.readouterr().err
