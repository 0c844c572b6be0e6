"""Pinned bases: every task's builds and proves its blobs; mismatches, bad tarballs and index configuration."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

import grader.pipeline.checkout as checkout
from grader.pipeline.checkout import (BaseBuildError, build_base, cache_dir, configured_index_url, fetch_sdist, sdist_url,
                             verify_blobs)
from grader.core.rubric import BaseRecipe, all_base_recipes

@pytest.fixture(scope="module")
def bases():
    """Every base, built (or reused) in the session's cache; the first run in a fresh cache downloads and builds."""
    return {task: build_base(task, recipe) for task, recipe in all_base_recipes().items()}


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the test must not reach the network")

    monkeypatch.setattr(checkout.urllib.request, "urlopen", refuse)


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fake_sdist(cache: Path, version: str, files: dict[str, bytes]) -> str:
    """A tiny ``vllm-<version>.tar.gz`` in ``cache/sdists``; returns its sha256."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(f"vllm-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    target = cache / "sdists" / f"vllm-{version}.tar.gz"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


# --- every task's real base ------------------------------------------------------------------------------------------


def test_every_base_builds_and_verifies(bases):
    assert set(bases) == set(all_base_recipes())
    for task, base in bases.items():
        recipe = all_base_recipes()[task]
        assert recipe.blobs, f"{task} pins no blob"
        assert verify_blobs(base.path, recipe.blobs) == []
        for rel in recipe.blobs:
            assert (base.path / rel).is_file(), f"{task}: {rel}"
        head = subprocess.run(["git", "-C", str(base.path), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert head.stdout.strip() == base.commit
        dirty = subprocess.run(["git", "-C", str(base.path), "status", "--porcelain"], capture_output=True,
                               text=True)
        assert dirty.stdout == "", f"{task}: the built base is not its own commit"


def test_second_build_is_fast(bases):
    start = time.monotonic()
    again = {task: build_base(task, recipe) for task, recipe in all_base_recipes().items()}
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"reusing the built bases took {elapsed:.1f} s"
    assert again == bases


def test_wrong_blob_is_named(bases):
    task, base = "moe-swap-ab", bases["moe-swap-ab"]
    good = all_base_recipes()[task].blobs
    rel = next(iter(good))
    problems = verify_blobs(base.path, {**good, rel: "1234567"})
    assert len(problems) == 1
    actual = subprocess.run(["git", "-C", str(base.path), "hash-object", rel], capture_output=True,
                            text=True).stdout.strip()
    assert rel in problems[0] and "1234567" in problems[0] and actual in problems[0]
    missing = verify_blobs(base.path, {"vllm/no_such_file.py": "abcdef0"})
    assert len(missing) == 1 and "vllm/no_such_file.py" in missing[0] and "missing" in missing[0]


# --- building from a small fake sdist in a private cache -------------------------------------------------------------


@pytest.fixture
def private_cache(tmp_path, monkeypatch, no_network):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("GRADER_CACHE", str(cache))
    assert cache_dir() == cache
    return cache


FILES = {"vllm/__init__.py": b"", "vllm/core.py": b"X = 1\n", "setup.py": b"print('setup')\n"}


def test_build_from_cached_sdist(private_cache):
    sha = fake_sdist(private_cache, "0.0.1", FILES)
    recipe = BaseRecipe("0.0.1", sha, None, {"vllm/core.py": git_blob(FILES["vllm/core.py"])[:7]})
    base = build_base("fake", recipe)
    assert base.path == private_cache / "bases" / "fake"
    assert (base.path / "vllm" / "core.py").read_bytes() == FILES["vllm/core.py"]
    assert build_base("fake", recipe) == base  # reused


def test_build_with_wrong_blob_raises_with_details(private_cache):
    sha = fake_sdist(private_cache, "0.0.1", FILES)
    actual = git_blob(FILES["vllm/core.py"])
    recipe = BaseRecipe("0.0.1", sha, None, {"vllm/core.py": "deadbee", "setup.py": git_blob(FILES["setup.py"])})
    with pytest.raises(BaseBuildError) as info:
        build_base("fake", recipe)
    message = str(info.value)
    assert "fake" in message and "vllm/core.py" in message and "deadbee" in message and actual in message
    assert "setup.py" not in message
    # Nothing half-built is left where a later run would take it for a base.
    assert not (private_cache / "bases" / "fake").exists()
    assert list((private_cache / "bases").iterdir()) == []


def test_real_sdist_with_wrong_blob_is_refused(bases, tmp_path, monkeypatch, no_network):
    """The real recipe with one blob wrong: refused, named, and no download (the sdist is linked from the cache)."""
    recipe = all_base_recipes()["moe-swap-ab"]
    sdist = cache_dir() / "sdists" / f"vllm-{recipe.sdist_version}.tar.gz"
    assert sdist.is_file()
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    (cache / "sdists" / sdist.name).symlink_to(sdist)
    monkeypatch.setenv("GRADER_CACHE", str(cache))
    rel = "vllm/model_executor/layers/fused_moe/fused_moe.py"
    bad = BaseRecipe(recipe.sdist_version, recipe.sdist_sha256, recipe.overlay, {**recipe.blobs, rel: "0badb10"})
    # Cheaper than unpacking 37 MB: check the tarball and stop before the unpack.
    assert fetch_sdist(bad.sdist_version, bad.sdist_sha256) == cache / "sdists" / sdist.name
    problems = verify_blobs(bases["moe-swap-ab"].path, bad.blobs)
    assert len(problems) == 1 and rel in problems[0] and "0badb10" in problems[0]


def test_overlay_that_does_not_apply(private_cache, tmp_path):
    sha = fake_sdist(private_cache, "0.0.1", FILES)
    overlay = tmp_path / "base.overlay.diff"
    overlay.write_text("diff --git a/vllm/core.py b/vllm/core.py\n--- a/vllm/core.py\n+++ b/vllm/core.py\n"
                       "@@ -1 +1 @@\n-X = 7\n+X = 8\n")
    with pytest.raises(BaseBuildError, match="overlay"):
        build_base("fake", BaseRecipe("0.0.1", sha, overlay, {}))
    assert not (private_cache / "bases" / "fake").exists()


def test_overlay_applies_and_changes_the_key(private_cache, tmp_path):
    sha = fake_sdist(private_cache, "0.0.1", FILES)
    plain = build_base("fake", BaseRecipe("0.0.1", sha, None, {}))
    overlay = tmp_path / "base.overlay.diff"
    overlay.write_text("diff --git a/vllm/core.py b/vllm/core.py\n--- a/vllm/core.py\n+++ b/vllm/core.py\n"
                       "@@ -1 +1 @@\n-X = 1\n+X = 2\n")
    layered = build_base("fake", BaseRecipe("0.0.1", sha, overlay, {"vllm/core.py": git_blob(b"X = 2\n")[:7]}))
    assert layered.key != plain.key and layered.commit != plain.commit
    assert (layered.path / "vllm" / "core.py").read_text() == "X = 2\n"


def test_tampered_base_is_rebuilt(private_cache):
    sha = fake_sdist(private_cache, "0.0.1", FILES)
    recipe = BaseRecipe("0.0.1", sha, None, {"vllm/core.py": git_blob(FILES["vllm/core.py"])})
    base = build_base("fake", recipe)
    (base.path / "vllm" / "core.py").write_text("tampered\n")
    again = build_base("fake", recipe)
    assert (again.path / "vllm" / "core.py").read_bytes() == FILES["vllm/core.py"]
    assert again.commit == base.commit  # fixed dates and author: the same tree gives the same commit


# --- the tarball and the index ----------------------------------------------------------------------------------------


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serve(monkeypatch, pages: dict[str, bytes]) -> list[str]:
    asked: list[str] = []

    def urlopen(url, timeout=None):
        asked.append(url)
        if url not in pages:
            raise AssertionError(f"unexpected fetch of {url}")
        return FakeResponse(pages[url])

    monkeypatch.setattr(checkout.urllib.request, "urlopen", urlopen)
    return asked


INDEX = "https://index.invalid/simple"


def index_page(version: str) -> bytes:
    return (f'<html><body><a href="../../files/vllm-{version}.tar.gz#sha256=00">vllm-{version}.tar.gz</a>'
            f'<a href="../../files/vllm-9.9.9.tar.gz">x</a></body></html>').encode()


def test_sdist_url_from_index_page(monkeypatch):
    serve(monkeypatch, {f"{INDEX}/vllm/": index_page("1.2.3")})
    assert sdist_url("1.2.3", INDEX + "/") == "https://index.invalid/files/vllm-1.2.3.tar.gz#sha256=00"
    with pytest.raises(BaseBuildError, match="vllm-4.5.6.tar.gz is not listed"):
        sdist_url("4.5.6", INDEX)


def test_cached_tarball_with_wrong_content_is_not_accepted(private_cache, monkeypatch):
    target = private_cache / "sdists" / "vllm-1.2.3.tar.gz"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not the release")
    good = b"the real release bytes"
    good_sha = hashlib.sha256(good).hexdigest()
    monkeypatch.setenv("PIP_INDEX_URL", INDEX)
    asked = serve(monkeypatch, {f"{INDEX}/vllm/": index_page("1.2.3"),
                                "https://index.invalid/files/vllm-1.2.3.tar.gz#sha256=00": good})
    assert fetch_sdist("1.2.3", good_sha) == target
    assert target.read_bytes() == good and len(asked) == 2


def test_downloaded_tarball_with_wrong_sha_is_rejected(private_cache, monkeypatch):
    target = private_cache / "sdists" / "vllm-1.2.3.tar.gz"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"stale")
    served = b"tampered release"
    expected = hashlib.sha256(b"the real release bytes").hexdigest()
    monkeypatch.setenv("PIP_INDEX_URL", INDEX)
    serve(monkeypatch, {f"{INDEX}/vllm/": index_page("1.2.3"),
                        "https://index.invalid/files/vllm-1.2.3.tar.gz#sha256=00": served})
    with pytest.raises(BaseBuildError) as info:
        fetch_sdist("1.2.3", expected)
    message = str(info.value)
    assert "sha256" in message and expected in message and hashlib.sha256(served).hexdigest() in message
    assert target.read_bytes() == b"stale"  # the bad download did not replace anything
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # and left no temp file


def test_build_refuses_bad_tarball(private_cache, monkeypatch):
    fake_sdist(private_cache, "0.0.1", FILES)
    monkeypatch.setenv("PIP_INDEX_URL", INDEX)
    serve(monkeypatch, {f"{INDEX}/vllm/": index_page("0.0.1"),
                        "https://index.invalid/files/vllm-0.0.1.tar.gz#sha256=00": b"junk"})
    with pytest.raises(BaseBuildError, match="sha256 mismatch"):
        build_base("fake", BaseRecipe("0.0.1", "0" * 64, None, {}))
    assert not (private_cache / "bases" / "fake").exists()


def test_configured_index_url_honours_pip_index_url(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.invalid/pypi/simple")
    assert configured_index_url() == "https://mirror.invalid/pypi/simple"


def test_configured_index_url_from_pip_config(monkeypatch):
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)

    def fake_run(argv, **kwargs):
        assert argv[-2:] == ["config", "list"]
        return subprocess.CompletedProcess(argv, 0, "global.index-url='https://conf.invalid/simple'\n", "")

    monkeypatch.setattr(checkout.subprocess, "run", fake_run)
    assert configured_index_url() == "https://conf.invalid/simple"

    monkeypatch.setattr(checkout.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "", ""))
    assert configured_index_url() == checkout.DEFAULT_INDEX


def test_private_tree_of_a_real_base(bases, tmp_path):
    """A candidate's tree is a private copy: applying the reference fix there leaves the base proven."""
    from grader.pipeline.apply import apply_diff, make_tree

    task = "moe-swap-ab"
    base = bases[task]
    tree = make_tree(base, tmp_path)
    rel = next(iter(all_base_recipes()[task].blobs))
    assert (tree / rel).read_bytes() == (base.path / rel).read_bytes()
    reference = Path(__file__).resolve().parents[2] / "reference_impl" / f"{task}.diff"
    if reference.is_file():
        report = apply_diff(reference.read_text(), tree)
        assert report.status == "applied", report.message
    (tree / rel).write_text("overwritten\n")
    assert verify_blobs(base.path, all_base_recipes()[task].blobs) == []
    status = subprocess.run(["git", "-C", str(base.path), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""
