"""Helpers shared by every task's hidden tests (importable: rubrics/pytest.ini puts rubrics/ on sys.path)."""

from __future__ import annotations

import functools
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


def load_probe_module(anchor: str | Path, name: str):
    """The probe module ``<name>.py`` of the task's ``probes/`` folder (beside the tests folder of ``anchor``),
    imported in the judge too: for pure-torch helpers both sides compute alike with (references, interpreter
    corrections). A probe module that imports vLLM cannot be loaded here: the judge refuses vLLM."""
    probes = Path(anchor).resolve().parent.parent / "probes"
    return load_beside(probes / "_", name)


def gpu_enabled() -> bool:
    """True when the grader asked for GPU evidence (GRADER_GPU=1) and this process can see a CUDA device."""
    return os.environ.get("GRADER_GPU") == "1" and cuda_present()


def cuda_present() -> bool:
    """Whether this process can see a CUDA device (so a GPU check that did not run was switched off, not absent)."""
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # a broken torch install reads as no GPU; the tests that need one are then skipped
        return False


@functools.lru_cache(maxsize=None)
def interpreter_gap() -> str | None:
    """Why the Triton interpreter of this environment cannot run a kernel that loops over a runtime bound, or None.

    Kernels run through the interpreter only where that gives sound evidence. Triton 3.6's interpreter turns such a
    bound into a one-element numpy array and calls int() on it, which numpy 2 refuses (Triton 3.7 squeezes it
    first); every MoE GEMM loops that way, so where the probe fails the tests that run one through the interpreter
    skip with this reason (their criterion is then not evaluated on CPU) instead of failing the candidate."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "the Triton interpreter is off in this run (GPU evidence decides instead)"
    try:
        import torch
        import triton

        from interpreter_probe import sum_in_blocks

        src, dst = torch.arange(100, dtype=torch.float32), torch.zeros(1)
        sum_in_blocks[(1,)](src, dst, 100, BLOCK=32)
        if float(dst[0]) != 4950.0:
            return f"environment: the Triton {triton.__version__} interpreter sums a 100-element loop to {float(dst[0])}"
    except Exception as exc:  # any failure of the probe is the environment's, not a candidate's
        version = getattr(sys.modules.get("triton"), "__version__", "?")
        return (f"environment: the Triton {version} interpreter cannot run a loop bounded by a runtime argument "
                f"({type(exc).__name__}: {str(exc)[:200]})")
    return None


def skip_unless_interpretable() -> None:
    """Skip the calling test, with interpreter_gap()'s reason, where the interpreter cannot run its kernel."""
    import pytest

    gap = interpreter_gap()
    if gap:
        pytest.skip(gap)

