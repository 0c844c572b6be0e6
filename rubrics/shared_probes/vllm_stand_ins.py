"""Stand-ins that let a vLLM tree import the same way on every machine, in every subject (before any probe runs).

- Compiled extensions: vLLM's CUDA platform imports ``vllm._C_stable_libtorch`` at import time on every machine
  where NVML sees a GPU, also with ``CUDA_VISIBLE_DEVICES=""``. A tree unpacked from the sdist has no compiled
  extensions, so without a stand-in nothing of vLLM imports on a GPU machine.
- NVML, for CPU-evidence runs: see ``hide_gpus_from_platform_probe``.

Stand-ins are the grader's environment, not the candidate's code: probes never call into them. Installed by
``subject_setup`` (which the subject imports before serving) and by the probes' own subprocesses.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

COMPILED_STAND_INS = ("vllm._C_stable_libtorch",)


def install(tree: str | None = None) -> list[str]:
    """Put an empty module in ``sys.modules`` for each compiled extension the tree (by default the one ``vllm``
    is found in on ``sys.path``, not imported) does not have built; return the names stood in for."""
    if tree:
        package = Path(tree) / "vllm"
    else:
        found = importlib.util.find_spec("vllm")
        package = Path(found.origin).parent if found and found.origin else Path("/nonexistent")
    installed = []
    for name in COMPILED_STAND_INS:
        stem = name.rsplit(".", 1)[1]
        if name not in sys.modules and not any(package.glob(f"{stem}*.so")):
            sys.modules[name] = types.ModuleType(name)
            installed.append(name)
    return installed



class NVMLError(Exception):
    """What vLLM's platform probe takes as "NVML unavailable" (it looks for "nvml" in the error's class name)."""


def _nvml_hidden(*args, **kwargs):
    raise NVMLError("NVML hidden: this hidden-test run collects CPU evidence")


def _nvml_attribute(name: str):
    """Every nvml* function of the stand-in fails as NVML does where there is no driver; nothing else exists
    (tools such as inspect probe modules for __file__ and the like)."""
    if name.startswith("nvml"):
        return _nvml_hidden
    raise AttributeError(name)


def hide_gpus_from_platform_probe() -> None:
    """For CPU-evidence runs: vLLM picks its CUDA platform through NVML, which ignores CUDA_VISIBLE_DEVICES, so
    on a GPU machine a CPU run would otherwise get a CUDA platform without a usable device. A stand-in for the
    NVML wrapper vLLM vendors makes the run see what it sees on a CPU-only machine."""
    name = "vllm.third_party.pynvml"
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.NVMLError = NVMLError
    module.__getattr__ = _nvml_attribute
    sys.modules[name] = module


def prepare_process() -> None:
    """Everything a process that imports the patched vLLM needs before it does: the compiled stand-ins, and for
    a CPU-evidence run (the grader sets GRADER_GPU=0) the NVML stand-in."""
    install()
    if os.environ.get("GRADER_GPU") != "1":
        hide_gpus_from_platform_probe()
