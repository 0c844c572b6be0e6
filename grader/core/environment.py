"""The grading environment: the interpreter's installed distributions, its fingerprint, whether a task's declared
requirements (PEP 508, base.toml's ``[environment] requires``) are met here, whether a CUDA GPU is there
(``detect_gpu``), and the defaults sized to the machine: candidates at once (``default_jobs``) and a subject's
memory limit (``memory_per_subject``)."""

from __future__ import annotations

import hashlib
import os
import platform
import site
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from grader.core.paths import cache_dir

# Where the cgroup file systems are mounted (the memory limits above this process are read there).
CGROUP_ROOT = Path("/sys/fs/cgroup")


class GraderUsageError(Exception):
    """The run cannot start as asked (an option this machine cannot honour): exit 2 before any work."""


def interpreter_site_folders() -> list[str]:
    """Where this interpreter's distributions are installed, as a fresh judge or subject sees them: not this
    process's sys.path, which libraries extend at run time (Ray adds its vendored packages)."""
    return [*site.getsitepackages(), site.getusersitepackages()]


@cache
def environment_fingerprint() -> str:
    """Python and every installed distribution (name and version): evidence from another environment, one with
    a package more or less, is not reused."""
    installed = sorted({f"{(d.metadata['Name'] or '?').lower()}=={d.version}"
                        for d in metadata.distributions(path=interpreter_site_folders())})
    digest = hashlib.sha256("\n".join(installed).encode()).hexdigest()[:16]
    return f"python {platform.python_version()}; {len(installed)} distributions {digest}"


def parse(text: str) -> Requirement:
    """One PEP 508 requirement; ``InvalidRequirement`` names what is wrong with it."""
    return Requirement(text)


def applies_here(requirement: Requirement) -> bool:
    """Whether the requirement's environment marker (if any) holds for this interpreter."""
    return requirement.marker is None or requirement.marker.evaluate()


def installed_version(name: str, path: list[str] | None = None) -> str | None:
    """The version of the installed distribution ``name`` (names compared as PEP 503 normalises them), looked up in
    the interpreter's own site folders unless ``path`` is given; None when it is not installed."""
    found = list(metadata.distributions(name=name, path=interpreter_site_folders() if path is None else path))
    return found[0].version if found else None


def unmet(requires: tuple[str, ...] | list[str], path: list[str] | None = None) -> list[str]:
    """Each declared requirement this environment does not satisfy, in words: ``msgspec (not installed)``,
    ``numpy>=3 (1.26.4 installed)``. Requirements whose marker does not hold here are not needed, so never unmet.
    Extras are not checked (only the distribution and its version)."""
    problems = []
    for text in requires:
        requirement = parse(text)
        if not applies_here(requirement):
            continue
        version = installed_version(requirement.name, path)
        shown = f"{requirement.name}{requirement.specifier}"
        if version is None:
            problems.append(f"{shown} (not installed)")
        elif requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{shown} ({version} installed)")
    return problems


def unmet_message(task_id: str, requires: tuple[str, ...] | list[str], path: list[str] | None = None) -> str | None:
    """``task X needs msgspec (not installed), numpy>=3 (1.26.4 installed)``, or None when all are satisfied."""
    problems = unmet(requires, path)
    return f"task {task_id} needs {', '.join(problems)}" if problems else None


# --- GPU detection ----------------------------------------------------------------------------------------------------


def detect_gpu(mode: str) -> tuple[bool, str]:
    """Resolve ``--gpu on|off|auto`` to whether GPU evidence runs, with the reason said plainly."""
    if mode == "off":
        return False, "GPU evidence switched off (--gpu off)"
    if cuda_available():
        return True, "CUDA GPU found: GPU evidence runs"
    if mode == "on":
        raise GraderUsageError("--gpu on was given but torch sees no CUDA device")
    return False, "no CUDA GPU found: GPU-only criteria are not evaluated"


def cuda_available() -> bool:
    """Whether torch sees a CUDA device, asked once per boot, environment and visible devices (a torch import
    costs seconds)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    parts = ["cuda probe", boot, sys.executable, environment_fingerprint(),
             os.environ.get("CUDA_VISIBLE_DEVICES") or "", os.environ.get("NVIDIA_VISIBLE_DEVICES") or ""]
    record = cache_dir() / "cuda-probe" / hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    if boot and record.is_file():
        return record.read_text() == "True"
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=300)
    available = probe.stdout.strip().endswith("True")
    if boot and probe.returncode == 0:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(str(available))
    return available


# --- job and memory defaults ------------------------------------------------------------------------------------------


def machine_memory_bytes(proc_cgroup: Path = Path("/proc/self/cgroup"), cgroup_root: Path = CGROUP_ROOT) -> int:
    """The memory this process may use: the host's RAM, or its cgroup's limit where that is lower."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 32 << 30
    limit = cgroup_memory_limit(proc_cgroup, cgroup_root)
    return min(ram, limit) if limit else ram


def cgroup_memory_limit(proc_cgroup: Path = Path("/proc/self/cgroup"), cgroup_root: Path = CGROUP_ROOT) -> int | None:
    """The lowest memory limit on this process's cgroup and every group above it (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``); None where none is set or readable. ``cgroup_root`` is where the cgroup file
    systems are mounted (a fake tree in tests)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":
            candidates += [(cgroup_root, rel, "memory.max"), (cgroup_root / "unified", rel, "memory.max")]
        elif "memory" in controllers.split(","):
            candidates.append((cgroup_root / "memory", rel, "memory.limit_in_bytes"))
    limits = []
    for mount, rel, name in candidates:
        group = mount / rel.lstrip("/")
        while True:
            limits += [value for value in [_limit_value(group / name)] if value]
            if group == mount or mount not in group.parents:
                break
            group = group.parent
    return min(limits) if limits else None


def _limit_value(path: Path) -> int | None:
    """A cgroup limit file's value in bytes; None for "max", v1's unlimited (a page-rounded 2**63) or unreadable."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= 1 << 62:
        return None
    return int(text)


# What one candidate (its judge and its subject) needs at least, and may use at most.
CANDIDATE_MEMORY_FLOOR = 6 << 30
CANDIDATE_MEMORY_CAP = 32 << 30


def default_jobs(memory: int | None = None) -> int:
    """Candidates graded at once by default: the cores, but never more than the memory (``machine_memory_bytes``
    unless given) holds at the floor."""
    memory = machine_memory_bytes() if memory is None else memory
    return max(1, min(os.cpu_count() or 1, memory * 3 // 4 // CANDIDATE_MEMORY_FLOOR))


def memory_per_subject(jobs: int, memory: int | None = None) -> int:
    """A subject's memory limit with ``jobs`` candidates at once: three quarters of the memory this grader may use
    (``machine_memory_bytes`` unless given) shared among them (so the limits together never overcommit it), within
    the floor and the cap."""
    memory = machine_memory_bytes() if memory is None else memory
    share = memory * 3 // 4 // max(1, jobs)
    return max(1 << 30, min(CANDIDATE_MEMORY_CAP, share))


@cache
def default_memory_bytes() -> int:
    """A subject's memory limit where none is given: the machine's share at the default number of jobs."""
    return memory_per_subject(default_jobs())
