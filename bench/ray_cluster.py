"""A Ray cluster on this machine, up before a measurement starts and stopped after it.

``grade --backend ray`` without ``--address`` starts a local cluster inside its own run, and that start is part of
its wall time (on the lent H200, 4.9 of the 6.9 s that Ray took longer than the local backend at 16 jobs). Where
grading at scale runs on Ray, the cluster is already up and ``grade`` joins it with ``--address``: this module
makes that case measurable, and testable, on one machine.

The cluster is ``ray start --head --block`` as a child process: it stays up while that process lives and drains
and stops on its SIGTERM, so stopping it touches no other Ray instance on the machine (``ray stop`` would stop
them all). Its actors inherit the environment the cluster was started with, not the joining ``grade``'s: so
``env`` must carry what they read (``GRADER_CACHE`` among it). Ray 2.60 starts a cluster with token
authentication, and on a machine without a token (``~/.ray/auth_token``) refuses to start: so each cluster here
gets a token of its own (``RAY_AUTH_TOKEN``), and a driver joins it with that token and ``RAY_AUTH_MODE=token``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STARTED = "Ray runtime started"
CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")  # where `ray start` records the machine's current cluster
START_LIMIT_S = 120
STOP_LIMIT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_cluster(cpus: int, env: dict[str, str], log: Path):
    """Yield ``(address, join_env, seconds it took to start)`` of a one-node cluster of ``cpus`` CPUs (and the
    machine's GPUs, which Ray detects), started with ``env`` plus ``join_env`` (a token of its own, which a driver
    joins with), its output in ``log``; stop it on exit."""
    join_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    port = free_port()
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
            f"--num-cpus={cpus}", "--include-dashboard=false", "--disable-usage-stats"]
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, env={**env, **join_env}, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until_up(proc, log, started)
        yield f"127.0.0.1:{port}", join_env, time.monotonic() - started
    finally:
        stop(proc)
        forget(port)


def wait_until_up(proc: subprocess.Popen, log: Path, started: float) -> None:
    while STARTED not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() - started > START_LIMIT_S:
            tail = log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"the Ray cluster did not start (exit {proc.poll()}, {log}):\n{tail}")
        time.sleep(0.1)


def forget(port: int) -> None:
    """Remove the address a stopped cluster left as the machine's current one (``ray stop`` does; a SIGTERM does
    not): ``ray.init()`` without an address would try to join it."""
    with contextlib.suppress(OSError):
        if CURRENT_CLUSTER.read_text().strip().endswith(f":{port}"):
            CURRENT_CLUSTER.unlink()


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM: the head drains and stops its processes; past ``STOP_LIMIT_S``, its whole session is killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_LIMIT_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the head started in its session and left behind
    proc.wait()
