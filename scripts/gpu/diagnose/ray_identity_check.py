"""Whether a Ray worker on this machine sees the grading identity the driver sees: the environment fingerprint,
a task's grading identity, the machine fields of the call-budget key and the interpreter's site folders, printed
side by side (``python scripts/gpu/diagnose/ray_identity_check.py``; needs Ray, no vLLM)."""

import os
import platform
import site
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))


def seen() -> dict:
    from grader.core.environment import environment_fingerprint, interpreter_site_folders
    from grader.core.identity import grading_identity
    from grader.core.rubric import all_tasks

    task = all_tasks()["int8-kv-rounding"]
    return {"executable": sys.executable, "prefix": sys.prefix, "site": site.getsitepackages(),
            "interpreter_site_folders": interpreter_site_folders(), "environment": environment_fingerprint(),
            "identity": grading_identity(task, False, True).key("check"), "node": platform.node(),
            "cpus": os.cpu_count()}


if __name__ == "__main__":
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="warning",
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    here, there = seen(), ray.get(ray.remote(seen).remote())
    for key in here:
        print(f"{key}: {'same' if here[key] == there[key] else 'DIFFERENT'}\n  driver {here[key]}\n  worker {there[key]}")
