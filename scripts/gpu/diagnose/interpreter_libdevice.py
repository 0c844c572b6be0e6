"""Does the Triton interpreter run a generic libdevice call for each GPU backend int8-kv-rounding stands for?

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 python3 scripts/gpu/diagnose/interpreter_libdevice.py

Why: on the lent H200, `grade --gpu off` graded int8-kv-rounding's `libdevice-rint` (a correct fix calling
`tldevice.rint`) partial, its ROCm cases raising `TypeError: cannot convert None ... to tensor` in the
interpreter, while this development machine runs the same cases. The rubric's interpreter shim
(rubrics/int8-kv-rounding/probes/int8_interp_shim.py) points the generic libdevice stubs at one backend's module;
this prints, per backend, whether that module imports and what a kernel calling `libdevice.rint` returns.
"""
import importlib
import os
import sys
import traceback
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "rubrics" / "int8-kv-rounding" / "probes"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.language.extra.libdevice as generic_ld  # noqa: E402

import int8_interp_shim  # noqa: E402

print("triton", triton.__version__, triton.__file__)
for name in ("triton.language.extra.cuda.libdevice", "triton.language.extra.hip.libdevice"):
    try:
        mod = importlib.import_module(name)
        print(f"import {name}: ok, rint={getattr(mod, 'rint', None)!r}")
    except Exception as exc:  # what this diagnostic is for
        print(f"import {name}: FAILED {exc!r}")
print("generic rint:", generic_ld.rint, getattr(generic_ld.rint, "__module__", None))


@triton.jit
def rint_kernel(x_ptr, out_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(out_ptr + offs, generic_ld.rint(tl.load(x_ptr + offs)))


x = torch.tensor([-2.5, -1.5, -0.6, 0.5, 1.5, 2.5, 3.3, 7.5], dtype=torch.float32)
for backend in (None, "cuda", "hip"):
    out = torch.full_like(x, 99.0)
    int8_interp_shim.install(backend)
    try:
        rint_kernel[(1,)](x, out, 8)
        print(f"backend={backend}: rint -> {out.tolist()} (want {torch.round(x).tolist()})")
    except Exception:
        print(f"backend={backend}: FAILED")
        traceback.print_exc(limit=6)
    finally:
        int8_interp_shim.uninstall()
