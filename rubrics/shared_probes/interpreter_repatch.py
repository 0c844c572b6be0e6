"""The Triton interpreter without its repeated re-patching of ``triton.language`` inside a launch.

Under ``TRITON_INTERPRET=1`` a kernel launch patches ``triton.language`` (every builtin of ``tl``, ``tl.core``,
``tl.math`` and ``tl.tensor`` rebound to the interpreter) and restores it when the launch ends. Every call of a
``@triton.jit`` helper from inside the kernel patches again, once per program instance, though the enclosing
launch already did: the builtins it finds are already rebound, and the few attributes it sets anew get
closures that behave as the ones in place. With Triton 3.7.1, sampled stacks of minimax-qk-norm's subjects put
about a quarter of their CPU time there, most of it in ``inspect.getmembers`` over the language modules.

``install`` skips that second patching and nothing else: a helper's patching is skipped only while a launch
is running that has patched every language module the helper's globals name. Anything else (a helper called
outside a launch, one whose module names a language module the kernel's does not) is patched as before. So
every kernel computes what it computes without this. Stand-in for the subject's environment, not the
candidate's code, as ``vllm_stand_ins``; the judge never needs it (it runs no candidate kernel).
"""

from __future__ import annotations

import os

# The launch in progress: None outside any, _PENDING while it has not yet patched, then the ids of the language
# modules it patched.
_PENDING = object()
_state: dict = {"launch": None}


def _language_ids(fn, languages) -> frozenset:
    return frozenset(id(value) for value in fn.__globals__.values() if any(value is lang for lang in languages))


def install() -> bool:
    """Install the skip into this process's Triton interpreter, when it runs kernels through it and has the
    launch and helper entry points this relies on; whether it was installed (idempotent)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    if getattr(interpreter, "_grader_repatch_skipped", False):
        return True
    executor = getattr(interpreter, "GridExecutor", None)
    patch_language = getattr(interpreter, "_patch_lang", None)
    if executor is None or patch_language is None or not hasattr(interpreter, "InterpretedFunction"):
        return False
    languages = (tl, tl.core)
    launch = executor.__call__
    empty_scope = getattr(interpreter, "_LangPatchScope", lambda: None)

    def launch_patching_once(self, *args, **kwargs):
        outer = _state["launch"]
        _state["launch"] = _PENDING
        try:
            return launch(self, *args, **kwargs)
        finally:
            _state["launch"] = outer

    def patch_unless_patched(fn):
        launch_now = _state["launch"]
        wanted = _language_ids(fn, languages)
        if launch_now is _PENDING:
            _state["launch"] = wanted
        elif launch_now is not None and wanted <= launch_now:
            return empty_scope()
        return patch_language(fn)

    executor.__call__ = launch_patching_once
    interpreter._patch_lang = patch_unless_patched
    interpreter._grader_repatch_skipped = True
    return True
