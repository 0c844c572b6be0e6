"""Probes for split-audio-progress, run in the sandboxed subject next to the tree under grading.

Each probe runs the candidate's ``vllm.multimodal.audio`` on arrays the judge drew and returns what came back as
data: for ``split_audio`` the shape of every chunk and the chunks joined along the time axis, for
``find_split_point`` the index. It never decides whether an answer is right, nor how long it may take: a call that
never returns (the loop of ``split_audio`` not moving forward) is the judge's to time.
"""

from __future__ import annotations

from probe_support import import_module, outcome_of

MODULE = "vllm.multimodal.audio"


def public_names(module: str = MODULE) -> list[str]:
    """The public names ``module`` defines once imported (its import errors fail the probe)."""
    loaded = import_module(module)
    return sorted(name for name in vars(loaded) if not name.startswith("_"))


def split_runs(cases: list[dict]) -> list[dict]:
    """``split_audio`` on each case (``audio`` and the four settings, passed by keyword as the speech-to-text
    server passes them), in order: ``{"returned": {"shapes", "joined"}}`` or what it raised."""
    audio = import_module(MODULE)
    return [outcome_of(_split, audio, case) for case in cases]


def _split(audio, case: dict) -> dict:
    import numpy as np

    chunks = audio.split_audio(
        audio_data=case["audio"].numpy(),
        sample_rate=case["sample_rate"],
        max_clip_duration_s=case["max_clip_duration_s"],
        overlap_duration_s=case["overlap_duration_s"],
        min_energy_window_size=case["min_energy_window_size"],
    )
    arrays = [np.asarray(chunk) for chunk in chunks]
    return {"shapes": [list(a.shape) for a in arrays],
            "joined": np.concatenate(arrays, axis=-1) if arrays else None}


def split_point_runs(cases: list[dict]) -> list[dict]:
    """``find_split_point`` on each case (``wav``, ``start_idx``, ``end_idx``, ``min_energy_window``), in order:
    ``{"returned": index}`` (an integer, or the repr of anything else) or what it raised."""
    audio = import_module(MODULE)
    return [outcome_of(_split_point, audio, case) for case in cases]


def _split_point(audio, case: dict):
    import numbers

    index = audio.find_split_point(case["wav"].numpy(), case["start_idx"], case["end_idx"],
                                   case["min_energy_window"])
    return int(index) if isinstance(index, numbers.Integral) else repr(index)


def process_state() -> dict:
    """The process-wide state a module could change on import or in a call: numpy's floating-point error handling
    (``np.geterr``) and the warning filters, each filter as ``(action, message, category, module, lineno)``."""
    import warnings

    import numpy as np

    filters = [[action, getattr(message, "pattern", message), getattr(category, "__name__", repr(category)),
                getattr(module, "pattern", module), lineno]
               for action, message, category, module, lineno in warnings.filters]
    return {"numpy_errors": dict(np.geterr()), "warning_filters": filters}
