"""Setup for the int8-kv-rounding hidden tests.

Two ways of running the real Triton kernel, decided once per process before vLLM or Triton is imported:

- CPU (the default, and whenever no CUDA GPU is asked for or visible): ``TRITON_INTERPRET=1`` with
  ``CUDA_VISIBLE_DEVICES=""`` so vLLM keeps the real Triton, plus the corrections in ``kv_interp_shim.py``
  (libdevice functions evaluated with numpy, fp32 -> fp8 through torch's cast). Tests parametrised with the
  ``cpu`` device run here; ``cuda`` ones are skipped by the shared conftest (marker ``gpu``).
- GPU (``GRADER_GPU=1`` and CUDA visible): the kernel compiles natively; ``cuda`` cases run, ``cpu`` cases
  are skipped as an environment matter (one process cannot both interpret and compile Triton kernels).
"""

from __future__ import annotations

import importlib
import os

import pytest

from rubric_support import gpu_enabled, load_beside


GPU_RUN = gpu_enabled()
INTERPRET = not GPU_RUN
if INTERPRET:
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
else:
    os.environ.pop("TRITON_INTERPRET", None)

shim = load_beside(__file__, "kv_interp_shim")


@pytest.fixture(scope="session", autouse=True)
def _interpreter_corrections():
    """Install the interpreter corrections for the whole CPU run and take them out afterwards."""
    if INTERPRET:
        shim.install()
    yield
    if INTERPRET:
        shim.uninstall()


@pytest.fixture(scope="session")
def _interpreter_checked(_interpreter_corrections):
    """Probe that the corrected interpreter rounds and converts like the hardware; else skip as environment."""
    if not INTERPRET:
        return
    import torch

    try:
        probe = load_beside(__file__, "kv_probe")
    except Exception as exc:  # pragma: no cover - environment
        pytest.skip(f"environment: Triton is not importable for the CPU interpreter: {exc!r}")

    x = torch.tensor([-31.6, -2.5, -1.5, -0.6, 0.5, 1.5, 2.5, 3.3], dtype=torch.float32)
    r = torch.empty_like(x)
    e = torch.empty_like(x)
    f = torch.empty(8, dtype=torch.float8_e4m3fn)
    try:
        probe.probe_rounding[(1,)](x, r, e, f, 8)
    except Exception as exc:
        pytest.skip(f"environment: the corrected Triton interpreter cannot run its probe kernel: {exc!r}")
    want_round = torch.sign(x) * torch.floor(x.abs() + 0.5)
    ok = (
        torch.equal(r, want_round)
        and torch.equal(e, torch.round(x))
        and torch.equal(f.view(torch.uint8), shim.torch_fp8_cast(x, torch.float8_e4m3fn).view(torch.uint8))
    )
    if not ok:
        pytest.skip("environment: the Triton interpreter's libdevice/fp8 corrections do not hold on this install")


@pytest.fixture(scope="session")
def kv_module(_interpreter_checked):
    """The candidate's ``triton_reshape_and_cache_flash`` module (an import error fails the test)."""
    return importlib.import_module("vllm.v1.attention.ops.triton_reshape_and_cache_flash")


class KVStore:
    """Drives ``triton_reshape_and_cache_flash_per_token_head_quant`` on small tensors."""

    INT8_SENTINEL = 77
    FP8_SENTINEL_BYTE = 0x11
    SCALE_SENTINEL = -3.0

    def __init__(self, module):
        self.module = module

    def run(self, key, value, cache_dtype, device, slots=None, block_size=4):
        """Store ``key``/``value`` ([tokens, heads, dim], any float dtype, on CPU) and return CPU results.

        Returns ``(key_cache, value_cache, k_scale_cache, v_scale_cache, slots)`` where the caches are indexed
        ``[block, slot_in_block, head, dim]``.
        """
        import torch

        if device == "cpu" and not INTERPRET:
            pytest.skip("environment: this run compiles Triton for the GPU; CPU-interpreter cases run in CPU runs")
        if device == "cuda" and INTERPRET:  # pragma: no cover - the shared conftest skips these already
            pytest.skip("environment: no CUDA GPU in this run")
        tokens, heads, dim = key.shape
        if slots is None:
            slots = list(range(tokens))
        num_blocks = max(max(slots), 0) // block_size + 1
        kc = torch.full((num_blocks, block_size, heads, dim), self.INT8_SENTINEL, dtype=torch.int8)
        vc = torch.full((num_blocks, block_size, heads, value.shape[2]), self.INT8_SENTINEL, dtype=torch.int8)
        if cache_dtype != torch.int8:
            kc = torch.full(kc.shape, self.FP8_SENTINEL_BYTE, dtype=torch.uint8).view(cache_dtype)
            vc = torch.full(vc.shape, self.FP8_SENTINEL_BYTE, dtype=torch.uint8).view(cache_dtype)
        ks = torch.full((num_blocks, block_size, heads), self.SCALE_SENTINEL, dtype=torch.float32)
        vs = ks.clone()
        args = [key, value, kc, vc, ks, vs, torch.tensor(slots, dtype=torch.long)]
        args = [a.to(device) for a in args]
        try:
            self.module.triton_reshape_and_cache_flash_per_token_head_quant(*args)
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:
            why = shim.interpreter_cannot_run(exc) if INTERPRET else None
            if why:
                pytest.skip(f"environment: the Triton interpreter cannot run this kernel on CPU: {why}")
            raise
        kc, vc, ks, vs = (a.cpu() for a in args[2:6])
        return kc, vc, ks, vs, slots


@pytest.fixture
def kv_store(kv_module):
    return KVStore(kv_module)


@pytest.fixture
def fp8_dtype(kv_module):
    """The FP8 dtype the module quantises to on this platform (e4m3fn on CUDA and on CPU)."""
    return kv_module.FP8_DTYPE
