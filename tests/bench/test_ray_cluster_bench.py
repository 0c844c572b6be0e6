"""bench/ray_cluster.py without Ray: a stopped cluster forgets only its own address, and a cluster that never
comes up is an error naming its log, not a wait without end."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ray_cluster  # noqa: E402


def test_a_stopped_cluster_forgets_its_own_address_and_no_other(tmp_path, monkeypatch):
    current = tmp_path / "ray_current_cluster"
    monkeypatch.setattr(ray_cluster, "CURRENT_CLUSTER", current)
    current.write_text("10.0.0.5:41001\n")
    ray_cluster.forget(41002)  # another cluster's address stays the machine's current one
    assert current.read_text() == "10.0.0.5:41001\n"
    ray_cluster.forget(41001)
    assert not current.exists()
    ray_cluster.forget(41001)  # nothing left to forget: not an error


def test_a_cluster_that_exits_before_it_is_up_is_an_error_naming_its_log(tmp_path):
    log = tmp_path / "cluster.txt"
    log.write_text("no token found\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    proc.wait()
    with pytest.raises(SystemExit, match="did not start") as raised:
        ray_cluster.wait_until_up(proc, log, started=time.monotonic())  # exited, not out of time
    assert str(log) in str(raised.value) and "no token found" in str(raised.value)
