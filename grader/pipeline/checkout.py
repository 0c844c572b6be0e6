"""Pinned vLLM bases: download the sdist, verify it, unpack, overlay, prove every expected blob, commit; on each
reuse, prove the tree whole (its manifest of every file) and its blobs again, else build it anew.

A built base is a git repository under the cache dir; each candidate gets a private copy of its files, a
repository of its own that borrows the base's objects (``grader.pipeline.apply.make_tree``), so the base itself is never
modified.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from grader.core.identity import recipe_key
from grader.core.paths import cache_dir, cache_lock
from grader.core.records import BuiltBase
from grader.core.rubric import BaseRecipe
from grader.sandbox.leftovers import owned_name

DEFAULT_INDEX = "https://pypi.org/simple"
STAMP = ".grader-base.json"
# (size, mtime_ns, inode) of every file of a built base, recorded at build and compared on each reuse.
MANIFEST = ".grader-manifest.json"
COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "grader", "GIT_AUTHOR_EMAIL": "grader@localhost",
    "GIT_COMMITTER_NAME": "grader", "GIT_COMMITTER_EMAIL": "grader@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


class BaseBuildError(Exception):
    """A base could not be built or does not match its recipe."""


def configured_index_url() -> str:
    """The package index pip is configured to use (environment, then pip's config files), else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return DEFAULT_INDEX
    match = re.search(r"^\S*\.index-url='([^']+)'", out, re.M)
    return match.group(1) if match else DEFAULT_INDEX


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href") if tag == "a" else None
        if href:
            name = urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1])
            self.links[name] = href


def sdist_url(version: str, index_url: str) -> str:
    """Find ``vllm-<version>.tar.gz`` on the index's PEP 503 page for vllm."""
    page_url = index_url.rstrip("/") + "/vllm/"
    with urllib.request.urlopen(page_url, timeout=120) as response:
        parser = _LinkParser()
        parser.feed(response.read().decode("utf-8", "replace"))
    filename = f"vllm-{version}.tar.gz"
    if filename not in parser.links:
        raise BaseBuildError(f"{filename} is not listed on {page_url}")
    return urllib.parse.urljoin(page_url, parser.links[filename])


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_sdist(version: str, folder: Path) -> Path:
    """Download ``vllm-<version>.tar.gz`` from the configured index into a temporary file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    url = sdist_url(version, configured_index_url())
    with tempfile.NamedTemporaryFile(dir=folder, delete=False) as tmp:
        try:
            with urllib.request.urlopen(url, timeout=600) as response:
                shutil.copyfileobj(response, tmp)
        except BaseException:  # unreachable, cut off, a full disk: no partial download stays behind
            tmp.close()
            os.unlink(tmp.name)
            raise
    return Path(tmp.name)


def fetch_sdist(version: str, sha256: str) -> Path:
    """Return the verified sdist tarball, downloading it into the cache if needed."""
    target = cache_dir() / "sdists" / f"vllm-{version}.tar.gz"
    if target.is_file() and sha256_of(target) == sha256:
        return target
    try:
        tmp = _download_sdist(version, target.parent)
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        state = "is damaged (its sha256 does not match the recipe)" if target.is_file() else "is not there"
        reason = getattr(exc, "reason", exc)
        raise BaseBuildError(f"the sdist {target} {state}, and a fresh copy could not be downloaded "
                             f"from {configured_index_url()}: {reason}") from None
    actual = sha256_of(tmp)
    if actual != sha256:
        os.unlink(tmp)
        raise BaseBuildError(f"sha256 mismatch for vllm-{version}.tar.gz: expected {sha256}, got {actual}")
    os.replace(tmp, target)
    return target


def obtain_sdist(version: str) -> Path:
    """The sdist of ``version`` for a recipe being written, which has no sha256 to check yet: the cached copy, else
    one downloaded from the configured index. The recipe then pins its sha256."""
    target = cache_dir() / "sdists" / f"vllm-{version}.tar.gz"
    if not target.is_file():
        os.replace(_download_sdist(version, target.parent), target)
    return target


def _unpack(tarball: Path, version: str, dest: Path) -> None:
    prefix = f"vllm-{version}/"
    with tarfile.open(tarball) as tar:
        members = []
        for member in tar.getmembers():
            if not member.name.startswith(prefix) or not (member.isfile() or member.isdir()):
                continue
            member.name = member.name[len(prefix):]
            if member.name:
                members.append(member)
        try:
            tar.extractall(dest, members=members, filter="data")
        except OSError as exc:  # a full or read-only cache: said with the folder being filled
            if exc.filename:
                raise
            raise OSError(exc.errno, exc.strerror, str(dest)) from None


def git(repo_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git in ``repo_path``; its output. A failure raises ``subprocess.CalledProcessError`` with stderr."""
    return subprocess.run(["git", *args], cwd=repo_path, check=True, capture_output=True, text=True,
                          env=dict(os.environ, **env) if env else None).stdout


def file_blobs(repo_path: Path, paths: list[str]) -> dict[str, str | None]:
    """Git's blob hash of each file of the tree (full length), None for a path that is no file there."""
    files = [rel for rel in paths if (repo_path / rel).is_file()]
    hashes = git(repo_path, "hash-object", "--", *files).split() if files else []
    found = dict(zip(files, hashes))
    return {rel: found.get(rel) for rel in paths}


def verify_blobs(repo_path: Path, blobs: dict[str, str]) -> list[str]:
    """Compare each file's git blob hash with the expected (possibly abbreviated) one; return mismatches."""
    problems = []
    for rel, actual in file_blobs(repo_path, list(blobs)).items():
        expected = blobs[rel]
        if actual is None:
            problems.append(f"{rel}: expected blob {expected}, file is missing")
            continue
        if not actual.startswith(expected):
            problems.append(f"{rel}: expected blob {expected}, actual {actual}")
    return problems


def _build(task: str, recipe: BaseRecipe, dest: Path) -> str:
    tarball = fetch_sdist(recipe.sdist_version, recipe.sdist_sha256)
    staging = Path(tempfile.mkdtemp(prefix=owned_name(f".{task}"), dir=dest.parent))
    try:
        _unpack(tarball, recipe.sdist_version, staging)
        git(staging, "init", "-q")
        if recipe.overlay is not None:
            try:
                git(staging, "apply", str(recipe.overlay))
            except subprocess.CalledProcessError as exc:
                raise BaseBuildError(f"{task}: overlay {recipe.overlay.name} does not apply: {exc.stderr}") from exc
        problems = verify_blobs(staging, recipe.blobs)
        if problems:
            raise BaseBuildError(f"{task}: base does not reproduce the expected blobs:\n  " + "\n  ".join(problems))
        git(staging, "add", "-A", "--force")
        git(staging, "-c", "commit.gpgsign=false", "commit", "-q", "--no-gpg-sign", "-m", f"base for {task}",
            env=COMMIT_ENV)
        commit = git(staging, "rev-parse", "HEAD").strip()
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
        return commit
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def tree_manifest(root: Path) -> dict[str, list[int]]:
    """(size, mtime_ns, inode) of every file and link under ``root`` outside ``.git``: a file deleted, added,
    rewritten or replaced since the manifest was taken changes it. A walk of lstat calls (tens of milliseconds
    for a vLLM tree), no reading of contents."""
    entries: dict[str, list[int]] = {}
    for folder, dirs, files in os.walk(root):
        if folder == str(root) and ".git" in dirs:
            dirs.remove(".git")
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            entries[os.path.relpath(path, root)] = [info.st_size, info.st_mtime_ns, info.st_ino]
    return entries


def is_whole(dest: Path) -> bool:
    """Whether the base at ``dest`` is the tree its build recorded (its manifest matches the files now)."""
    try:
        recorded = json.loads((dest / ".git" / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return recorded == tree_manifest(dest)


def whole_tree_problem(base: BuiltBase) -> str | None:
    """The full check (``bases --verify``): git's hash of every file of the base as it is on disk, through an index
    of its own so that no cached stat decides it, against the tree recorded at build. A mismatch also drops the
    manifest, so the next use rebuilds the base."""
    try:
        recorded = json.loads((base.path / ".git" / STAMP).read_text()).get("tree")
    except (OSError, ValueError):
        recorded = None
    with tempfile.TemporaryDirectory() as folder:
        fresh = {"GIT_INDEX_FILE": str(Path(folder) / "index")}
        git(base.path, "add", "-A", "--force", env=fresh)
        now = git(base.path, "write-tree", env=fresh).strip()
    if recorded is None or now == recorded:
        return None
    (base.path / ".git" / MANIFEST).unlink(missing_ok=True)
    return f"the tree differs from its build (tree {now}, built as {recorded}): it is rebuilt on its next use"


def is_built(task: str, recipe: BaseRecipe) -> bool:
    """Whether a base of this recipe is on disk (build_base will still prove its blobs): cheap, no git."""
    stamp = cache_dir() / "bases" / task / ".git" / STAMP
    try:
        return json.loads(stamp.read_text()).get("key") == recipe_key(recipe)
    except (OSError, ValueError):
        return False


def build_base(task: str, recipe: BaseRecipe) -> BuiltBase:
    """Build (or reuse from the cache) the pinned base of ``task`` and prove it against its blobs.

    A base is built once per machine: the build runs under a lock of its own across every grader process using
    this cache, and a process that waited for another's build finds that base and reuses it rather than removing
    it (which would pull it from under the other process's copies)."""
    key = recipe_key(recipe)
    bases = cache_dir() / "bases"
    bases.mkdir(parents=True, exist_ok=True)
    # Resolved: the sandbox binds real paths, so a cache reached through a symlink must be named by its real one.
    dest = bases.resolve() / task
    found = reusable_base(task, recipe, dest, key)
    if found is not None:
        return found
    with cache_lock(f"base-build-{task}"):
        found = reusable_base(task, recipe, dest, key)
        if found is not None:
            return found
        commit = _build(task, recipe, dest)
        (dest / ".git" / MANIFEST).write_text(json.dumps(tree_manifest(dest)))
        tree = git(dest, "rev-parse", "HEAD^{tree}").strip()
        (dest / ".git" / STAMP).write_text(json.dumps({"key": key, "commit": commit, "tree": tree}))
        return BuiltBase(task, dest, commit, key)


def reusable_base(task: str, recipe: BaseRecipe, dest: Path, key: str) -> BuiltBase | None:
    """The base at ``dest`` when it was built from this recipe and is whole (its manifest) with every expected
    blob; else None (a file deleted or changed since the build: it is built anew)."""
    try:
        recorded = json.loads((dest / ".git" / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or recorded.get("key") != key or "commit" not in recorded:
        return None
    if is_whole(dest) and not verify_blobs(dest, recipe.blobs):
        return BuiltBase(task, dest, recorded["commit"], key)
    return None
