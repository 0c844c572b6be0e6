"""Every OSError a user can cause ends in one line naming the cause and the path, exit 2, never a traceback:
through the real CLI, on real small or read-only filesystems (tmpfs mounts; skipped where mounting is not
allowed). A damaged sdist while the index is unreachable names the sdist and why it could not be replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.paths import cache_dir

REPO = Path(__file__).resolve().parents[2]
TASK = "int8-kv-rounding"
PAGE = 4096


@pytest.fixture
def mount(tmp_path):
    """Factory: a tmpfs of ``size`` bytes (read-only with ``ro``) at a fresh folder, unmounted afterwards."""
    mounted = []

    def make(name: str, size: int, ro: bool = False) -> Path:
        point = tmp_path / name
        point.mkdir()
        options = f"size={size}" + (",ro" if ro else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield make
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "grade.py"), *args], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", **env), timeout=600)


def one_error_line(done: subprocess.CompletedProcess, cause: str, path: Path) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and cause in errors[0] and str(path) in errors[0], done.stderr


def test_full_out_is_one_line_and_leaves_no_temporary_files(tmp_path, mount):
    disk = mount("full", 16 * PAGE)
    (disk / "filler").write_bytes(b"\0" * 15 * PAGE)  # one page left: the lock file's
    empty = tmp_path / "in" / TASK / "empty.diff"
    empty.parent.mkdir(parents=True)
    empty.write_text("")
    out = disk / "out"
    done = run_cli(str(tmp_path / "in"), "--out", str(out), "--jobs", "1", "--gpu", "off")
    one_error_line(done, "no space left on device", out)
    assert "warning: the results store cannot be written" in done.stderr, done.stderr
    left = [p.name for p in out.rglob(".*") if p.name != ".grader.lock"]
    assert not left, left


def test_read_only_out_is_one_line(tmp_path, mount):
    disk = mount("ro", 16 * PAGE, ro=True)
    out = disk / "out"
    done = run_cli(str(REPO / "reference_impl" / f"{TASK}.diff"), "--out", str(out), "--gpu", "off")
    one_error_line(done, "read-only file system", out)


@pytest.mark.slow
def test_full_scratch_is_the_environments_state_naming_the_path(tmp_path, mount):
    scratch = mount("scratch", 256 * PAGE)
    out = tmp_path / "out"
    done = run_cli(str(REPO / "reference_impl" / f"{TASK}.diff"), "--out", str(out), "--jobs", "1", "--gpu", "off",
                   "--no-cache", GRADER_SCRATCH=str(scratch))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    (result,) = json.loads((out / "results.json").read_text())["candidates"]
    assert (result["verdict"], result["run_status"]) == ("error", "environment_error"), result
    assert "no space left on device at " + str(scratch) in result["error"], result["error"]
    assert "returned non-zero exit status" not in result["error"]


def test_damaged_sdist_with_the_index_unreachable_names_the_sdist(tmp_path):
    sdists = sorted((cache_dir() / "sdists").glob("vllm-*.tar.gz"))
    if not sdists:
        pytest.skip("no sdist in the cache to damage a copy of")
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    for sdist in sdists:
        with open(sdist, "rb") as whole:
            (cache / "sdists" / sdist.name).write_bytes(whole.read(1 << 16))  # cut short
    done = run_cli("bases", "--task", TASK, GRADER_CACHE=str(cache), PIP_INDEX_URL="http://127.0.0.1:9/simple")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "is damaged" in done.stdout and "could not be downloaded from http://127.0.0.1:9/simple" in done.stdout
    assert str(cache / "sdists") in done.stdout, done.stdout
    assert not [p for p in (cache / "sdists").iterdir() if not p.name.endswith(".tar.gz")], "partial download left"
