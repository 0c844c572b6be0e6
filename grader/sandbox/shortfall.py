"""What a subject lacks of the full sandbox on this machine, said in words (grader.sandbox.contain probes it).

The full sandbox is: a per-candidate unprivileged uid (so the tree is read-only to the candidate and its
processes can be counted), a memory cgroup bounding the subject, and its own network, mount, IPC and PID
namespaces. A run with less still grades, and says so loudly; ``--contain strict`` refuses it.
"""

from __future__ import annotations

from grader.sandbox.contain import Capabilities


def shortfalls(caps: Capabilities) -> list[str]:
    """One phrase per part of the full sandbox that subjects do not get here (empty: the full sandbox)."""
    missing = []
    if not caps.drop_uid:
        missing.append(f"subjects run under the caller's uid ({caps.drop_uid_reason})")
    if not caps.memory_cgroup:
        missing.append(f"subjects have no memory bound ({caps.memory_reason})")
    if not caps.net:
        missing.append(f"no network namespace ({caps.net_reason})")
    if not caps.private_tmp:
        missing.append(f"no private file system view ({caps.private_tmp_reason})")
    if not caps.ipc_pid:
        missing.append(f"no IPC/PID namespaces ({caps.ipc_pid_reason})")
    return missing


def warning_line(missing: list[str]) -> str:
    return ("warning: weaker containment than the full sandbox: " + "; ".join(missing)
            + " (--contain strict refuses to run like this)")
