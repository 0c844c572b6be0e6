"""Judge-side set-up for rocm-mx-emulation. The ROCm harness (stubbed ``vllm.platforms.rocm``, fake platform,
amd-quark and compiled-op stand-ins) lives in the subject: ``probes/rocm_mx_harness.py``. Tests name the faked GPU
of each probe call with ``rocm()`` / ``cuda()`` below; each call starts from ROCm gfx942 without AITER and
leaves nothing behind.
"""

from __future__ import annotations

import os

# As in the subject's harness: the Triton GEMMs of the emulation path run under the interpreter, and whether it
# can run them here is decided in the judge (rubric_support.skip_unless_interpretable).
os.environ.setdefault("TRITON_INTERPRET", "1")
