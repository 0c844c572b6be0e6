"""What a killed grader leaves behind, reclaimed by the next one.

A grader that is SIGKILLed (or loses its machine) cannot remove its scratch trees, its warm workers' homes, its
subjects' cgroups or a half-built base's staging folder. Each of those is named with the pid of the process that
made it (``owned_name``: ``<kind>-pid<N>-...``; cgroups ``grader-pid<N>-...``), and ``reclaim`` removes those whose
owner is no longer alive. A live owner's, or one whose pid was reused by a live process, are left alone.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

OWNER = re.compile(r"-pid(\d+)-")


def owned_name(kind: str) -> str:
    """A name prefix that records this process as the owner (``tempfile.mkdtemp(prefix=...)``)."""
    return f"{kind}-pid{os.getpid()}-"


def owner_of(name: str) -> int | None:
    found = OWNER.search(name)
    return int(found.group(1)) if found else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphaned(entry: Path, prefixes: tuple[str, ...]) -> bool:
    if not entry.name.startswith(prefixes):
        return False
    owner = owner_of(entry.name)
    return owner is not None and owner != os.getpid() and not alive(owner)


def reclaim_folders(folder: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """Remove each folder in ``folder`` named with one of ``prefixes`` whose owner is dead; what was removed."""
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink() and _orphaned(entry, prefixes):
            shutil.rmtree(entry, ignore_errors=True)
            if not entry.exists():
                removed.append(entry)
    return removed


def reclaim_cgroups(parent: Path) -> list[Path]:
    """Empty (SIGKILL what is left in them) and remove a dead grader's subject cgroups under ``parent``."""
    removed = []
    try:
        entries = [e for e in parent.iterdir() if e.is_dir()]
    except OSError:
        return removed
    for group in entries:
        if not _orphaned(group, ("grader-pid",)):
            continue
        try:
            for pid in Path(group, "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        for _ in range(50):
            try:
                group.rmdir()
                removed.append(group)
                break
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    break
                time.sleep(0.02)
    return removed


# Folder prefixes a grader makes in its scratch area and temp dir (with ``owned_name``).
SCRATCH_KINDS = ("grader-",)
TEMP_KINDS = ("grader-warm-", "grader-probe-", "grader-env-")


def reclaim(scratch: Path | None = None, cache: Path | None = None) -> list[Path]:
    """Everything dead graders left in the scratch area, the temp dir, the bases' staging folders of ``cache`` and
    the subjects' cgroups of this machine; what was removed."""
    from grader.core.paths import cache_dir, scratch_root
    from grader.sandbox import contain

    scratch = scratch or scratch_root()
    removed = reclaim_folders(scratch, SCRATCH_KINDS)
    if Path(tempfile.gettempdir()) != scratch:
        removed += reclaim_folders(Path(tempfile.gettempdir()), TEMP_KINDS)
    removed += reclaim_folders((cache or cache_dir()) / "bases", (".",))
    caps = contain.probe()
    for parent in (caps.cgroup, caps.memory_cgroup, caps.cpu_cgroup):
        if parent:
            removed += reclaim_cgroups(Path(parent))
    return removed
