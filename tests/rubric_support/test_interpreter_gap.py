"""``rubric_support.interpreter_gap``: hidden tests that run a Triton GEMM through the interpreter skip (criterion not
evaluated) where the interpreter cannot run it, and run where it can.

Each case runs in a fresh process: TRITON_INTERPRET is read when triton is first imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
RUBRICS = Path(__file__).resolve().parents[2] / "rubrics"


def _gap(env_update: dict[str, str | None], prelude: str = "") -> str | None:
    env = {k: v for k, v in os.environ.items() if k not in env_update}
    env.update({k: v for k, v in env_update.items() if v is not None})
    env["PYTHONPATH"] = str(RUBRICS)
    code = prelude + "import json, rubric_support; print(json.dumps(rubric_support.interpreter_gap()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pinned_triton_interpreter_runs_a_runtime_bounded_loop():
    assert _gap({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}) is None


def test_interpreter_off_is_a_reason_to_skip():
    assert "interpreter is off" in _gap({"TRITON_INTERPRET": None})


def test_an_interpreter_that_mishandles_runtime_bounds_is_named_as_the_environment():
    # Reproduce Triton 3.6's failure: converting a one-element array bound to a Python int raises.
    prelude = (
        "import triton.runtime.interpreter as I\n"
        "real = I._patch_lang_tensor\n"
        "def broken(tensor, scope):\n"
        "    real(tensor, scope)\n"
        "    scope.set_attr(tensor, '__index__', lambda self: int(self.handle.data.reshape(1)))\n"
        "I._patch_lang_tensor = broken\n"
    )
    reason = _gap({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}, prelude)
    assert reason and reason.startswith("environment: the Triton") and "TypeError" in reason, reason
