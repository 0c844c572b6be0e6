"""Helpers for probes: functions that run in a subject, next to the candidate's code, and return plain data.

A probe installs what it needs (fakes, spies), runs the code under test on the arguments the judge gave, and
returns observations: values, dtypes, tensors, the type and message of what was raised. It never decides
whether an observation is right; the judge does. Whatever a probe installs it undoes, so that the next probe in
the same subject starts clean.
"""

from __future__ import annotations

import contextlib
import importlib
import sys


class Patches:
    """``setattr`` that remembers the old values and puts them back on ``undo`` (last in, first out)."""

    _MISSING = object()

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []

    def set(self, target, name: str, value) -> None:
        self._undo.append((target, name, target.__dict__.get(name, self._MISSING)
                           if hasattr(target, "__dict__") else getattr(target, name, self._MISSING)))
        setattr(target, name, value)

    def undo(self) -> None:
        while self._undo:
            target, name, old = self._undo.pop()
            if old is self._MISSING:
                try:
                    delattr(target, name)
                except AttributeError:
                    pass
            else:
                setattr(target, name, old)

    def __enter__(self) -> "Patches":
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def outcome_of(function, *args, **kwargs) -> dict:
    """``{"returned": value}``, or ``{"raised": type name, "message": text}``: an exception is an observation."""
    try:
        return {"returned": function(*args, **kwargs)}
    except Exception as exc:  # noqa: BLE001 - the judge decides what each exception means
        return {"raised": type(exc).__name__, "message": str(exc)[:2000]}


def import_module(name: str):
    """Import a module of the tree under test; its import errors propagate (they fail the probe)."""
    return importlib.import_module(name)


def put_back(modules: dict) -> None:
    """Put the given loaded modules (name -> module) back in ``sys.modules`` and on their packages, after a probe
    imported them anew (a platform read at import is then read on the platform the probe plays)."""
    for name, module in modules.items():
        sys.modules[name] = module
        package, _, leaf = name.rpartition(".")
        setattr(sys.modules[package], leaf, module)


def install_platform(patches: Patches, replaced: list, fake) -> None:
    """Make ``fake`` vLLM's ``current_platform`` everywhere vLLM code can see it: the platforms module and every
    loaded ``vllm`` module still holding the real platform or a fake installed earlier (``replaced``, which this
    appends to)."""
    import sys

    import vllm.platforms as vp

    patches.set(vp, "_current_platform", fake)
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "vllm" or name.startswith("vllm.")):
            continue
        held = getattr(mod, "__dict__", {}).get("current_platform")
        if any(held is earlier for earlier in replaced):
            patches.set(mod, "current_platform", fake)
    replaced.append(fake)


def has_torch_op(namespace: str, name: str) -> bool:
    """Whether ``torch.ops.<namespace>.<name>`` exists (a compiled op or a stand-in already registered)."""
    import torch

    try:
        getattr(getattr(torch.ops, namespace), name)
        return True
    except (AttributeError, RuntimeError):
        return False


@contextlib.contextmanager
def unwritten_memory_is_nan():
    """Tensors allocated without values (``torch.empty``) come filled with NaN for the block, so an output or
    buffer a fix never writes reads as non-finite on every run, not as whatever the allocator's memory held (which
    changed a verdict from one grading to the next). torch's deterministic mode fills uninitialized memory;
    ``warn_only`` so that no op refuses to run."""
    import torch

    held = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(held[0], warn_only=held[1])
        torch.utils.deterministic.fill_uninitialized_memory = held[2]
