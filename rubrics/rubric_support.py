"""Helpers shared by every task's hidden tests (importable: rubrics/pytest.ini puts rubrics/ on sys.path)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def load_beside(anchor: str | Path, name: str):
    """The module ``<name>.py`` in the folder of ``anchor`` (a test file's ``__file__``), imported once per process.

    Task folders are not packages (their names have hyphens) and the tests run with --import-mode=importlib, so
    helper modules are loaded by path. The module name includes the task's folder, so helpers of different tasks
    with the same file name never meet in ``sys.modules``."""
    path = Path(anchor).resolve().parent / f"{name}.py"
    task = path.parent.parent.name.replace("-", "_")
    full = f"rubric_{task}_{name}"
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(full, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[full]
            raise
    return sys.modules[full]


def gpu_enabled() -> bool:
    """True when the grader asked for GPU evidence (GRADER_GPU=1) and this process can see a CUDA device."""
    if os.environ.get("GRADER_GPU") != "1":
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # a broken torch install reads as no GPU; the tests that need one are then skipped
        return False
