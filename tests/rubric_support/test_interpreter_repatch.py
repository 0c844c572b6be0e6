"""``shared_probes/interpreter_repatch``: inside a launch, a helper's re-patching of ``triton.language`` is skipped,
and nothing a kernel computes changes.

Each case runs in a fresh interpreter: TRITON_INTERPRET is read when triton is first imported, and the skip
changes the process's interpreter for good.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
SHARED_PROBES = Path(__file__).resolve().parents[2] / "rubrics" / "shared_probes"

# Kernels with helpers, one of them reached through ``tl.core`` only (its module names no ``tl``), run on
# several programs; the script reports their outputs, how often the interpreter's own patching ran, and whether
# triton.language is back to its own builtins after each launch.
SCRIPT = r"""
import json, sys
import torch, triton, triton.language as tl
from triton.runtime import interpreter
import interpreter_repatch

# Counted beneath the skip (installed after this): the patching that really runs.
own = interpreter._patch_lang
patched = []
def counting(fn):
    patched.append(fn.__name__)
    return own(fn)
interpreter._patch_lang = counting
installed = interpreter_repatch.install() if sys.argv[1] == "install" else False

namespace = {"triton": triton, "core": tl.core}
exec(compile('''
@triton.jit
def scaled(x, s):
    return core.maximum(x * s, x)
''', "core_only_helper", "exec"), namespace)
scaled = namespace["scaled"]

@triton.jit
def square(x):
    return x * x

@triton.jit
def mean_square(x, n: tl.constexpr):
    return tl.sum(square(x), axis=0) / n

@triton.jit
def kernel(x_ptr, out_ptr, n: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * n + tl.arange(0, n))
    ms = mean_square(x, n)
    tl.store(out_ptr + row * n + tl.arange(0, n), scaled(x * tl.rsqrt(ms + 1e-6), 2.0))

torch.manual_seed(0)
x = torch.randn(6, 8)
outputs, restored = [], []
for _ in range(2):
    out = torch.empty_like(x)
    kernel[(6,)](x, out, 8)
    outputs.append(out.tolist())
    restored.append([tl.core.is_builtin(tl.load), tl.core.is_builtin(tl.core.maximum)])
print(json.dumps({"installed": installed, "outputs": outputs, "restored": restored, "patched": patched}))
"""

def _run(mode: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(SHARED_PROBES)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_helpers_inside_a_launch_are_not_patched_again_and_outputs_are_unchanged():
    plain, skipping = _run("plain"), _run("install")
    assert skipping["installed"] and not plain["installed"]
    assert skipping["outputs"] == plain["outputs"]
    # After each launch triton.language has its own builtins again. (The helper reached through ``tl.core``
    # leaves ``tl.core`` patched for good, with or without the skip: the interpreter never restores a helper's
    # patching.)
    assert plain["restored"] == skipping["restored"]
    assert [load for load, _ in skipping["restored"]] == [True, True]
    # Without the skip, every launch and every helper call of each of the 6 programs patches.
    assert plain["patched"].count("kernel") == skipping["patched"].count("kernel") == 2
    assert plain["patched"].count("square") == plain["patched"].count("mean_square") == 12
    assert "square" not in skipping["patched"] and "mean_square" not in skipping["patched"]
    # A helper whose module names a language module the kernel's does not is patched as before.
    assert skipping["patched"].count("scaled") == plain["patched"].count("scaled") == 12


def test_nothing_is_installed_without_the_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(SHARED_PROBES)
    code = "import interpreter_repatch, sys; print(interpreter_repatch.install(), 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
