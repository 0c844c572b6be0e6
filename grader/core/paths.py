"""Where the grader keeps things and how it writes them: the cache, output folders, atomic writes, page names.

Writes to a cache are best effort: a cache that cannot be written (disk full, read-only) costs speed, never a
grading. ``CacheWriter`` says so once per cache and lets grading go on.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Reports are read by other users (a CI runner's upload step, a web server): files 0644, folders 0755, whatever
# the umask. Nothing secret is ever written into them.
FILE_MODE, FOLDER_MODE = 0o644, 0o755


# The operator's settings of the two folders (listed with every other GRADER_* name in grader.sandbox.protocol).
CACHE_VARIABLE = "GRADER_CACHE"
SCRATCH_VARIABLE = "GRADER_SCRATCH"


def cache_dir() -> Path:
    """Where sdists, built bases and evidence live: ``$GRADER_CACHE``, else the user cache dir."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "grader"


@contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """An exclusive lock named ``name`` held across every grader process that uses this cache (a ``flock`` on a
    file under its ``locks/``): what one process makes for all of them (a base, a task's control, the controls'
    call times) is made once, while the others wait and then find it. Released when the block ends, or with the
    process. A cache where no lock file can be made (read-only, full) costs the sharing, never the work: the block
    runs unlocked."""
    try:
        folder = cache_dir() / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / f"{name}.lock", "a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def scratch_root() -> Path:
    """Where per-candidate trees are made: ``$GRADER_SCRATCH``, else RAM-backed /dev/shm, else the temp dir."""
    if os.environ.get(SCRATCH_VARIABLE):
        return Path(os.environ[SCRATCH_VARIABLE])
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def output_folder(path: Path) -> Path:
    """``path`` created (with its parents) and opened to readers."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, FOLDER_MODE)
    return path


def atomic_copy(source: Path, path: Path) -> None:
    """Copy ``source`` to ``path`` as ``atomic_write`` writes: whole or not at all, even on a filling disk."""
    atomic_write(path, source.read_bytes())


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write via a temporary file and rename, so a killed run never leaves a half-written file; a write that
    fails (disk full) removes its temporary file and raises."""
    output_folder(path.parent)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with open(handle, "wb") as tmp:
            tmp.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.chmod(name, FILE_MODE)
        os.replace(name, path)
    except BaseException as exc:
        try:
            os.unlink(name)
        except OSError:
            pass
        if isinstance(exc, OSError) and not exc.filename:  # a write's error names no file: this one
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it, as far as it can be removed, in a child process (``rm``, which
    follows no link and stays on one filesystem). Python's ``shutil.rmtree`` takes the interpreter lock again after
    each of its thousands of calls, so with a grader's other threads busy in Python a candidate's tree took seconds
    instead of a tenth of one (``bench/remove_tree.py``). What ``rm`` left is tried once more in Python."""
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    except OSError:  # no rm on this machine
        pass
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def make_import_root(tree: Path, root: Path) -> Path:
    """``root``, a new folder holding only links to ``tree``'s ``vllm`` package and its metadata: what goes at the
    front of a subject's (or a probe's) sys.path, so that nothing else of the tree is importable."""
    root.mkdir()
    for name in ("vllm", "vllm.egg-info"):
        if (tree / name).exists():
            os.symlink(tree / name, root / name)
    return root


def page_name(candidate_id: str) -> str:
    """A file name for one candidate's page: readable, and unique per id (a short hash of the exact id), so ids
    that differ only in characters a file name cannot hold never share a page or a store file. The hash reads
    the id through ``surrogatepass``, which is injective (``surrogateescape`` gives "é" and "\\udcc3\\udca9" the
    same bytes)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", candidate_id)[:80].lstrip(".") or "candidate"
    digest = hashlib.sha256(candidate_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{readable}-{digest}.html"


class CacheWriter:
    """Best-effort writes into one cache: a failed write is reported once (on stderr) and grading goes on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.failed = False
        self._lock = threading.Lock()

    def write(self, path: Path, text: str) -> bool:
        """Whether ``text`` was written to ``path``."""
        try:
            atomic_write(path, text)
            return True
        except OSError as exc:
            with self._lock:
                first, self.failed = not self.failed, True
            if first:
                print(f"warning: the {self.name} cannot be written ({path.parent}: {exc.strerror or exc}); "
                      "grading goes on without keeping entries there", file=sys.stderr, flush=True)
            return False


def secret_seed(cache: Path | None = None) -> str:
    """A per-installation secret from which judges draw deciding inputs: stable across runs (so identical runs
    agree), never visible to a subject (the cache folder is hidden from it). ``cache``: the cache folder it lives
    in (default ``cache_dir()``).

    Made once: the first maker wins, since a hard link never replaces an existing file, and every judge of every
    thread and process reads the winner's (candidates graded at once must draw the same inputs)."""
    path = (cache or cache_dir()) / "judge-secret"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, draft = tempfile.mkstemp(prefix=".judge-secret-", dir=path.parent)  # mode 0600, a name of its own
        try:
            os.write(fd, os.urandom(16).hex().encode())
            os.close(fd)
            try:
                os.link(draft, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(draft)
    return path.read_text().strip()


def secret_digest() -> str:
    """What identifies the judge's secret in cache and store keys: a digest, never the secret. Evidence drawn
    under one secret is never replayed under another."""
    return hashlib.sha256(b"grader judge secret\0" + secret_seed().encode()).hexdigest()[:16]
