"""Setup for the int8-kv-rounding hidden tests, in the judge (which never imports vLLM).

The real Triton kernel runs in the subject (``probes/int8_kv_probes.py``), on the tensors built here, in one of
two ways that the grader decides for the whole run (``grader/sandbox/launch.py``, ``base_environment``):

- CPU (no GPU evidence): ``TRITON_INTERPRET=1`` and ``CUDA_VISIBLE_DEVICES=""`` in the judge and in the subject;
  the subject installs the corrections of ``kv_interp_shim.py`` (libdevice functions evaluated with numpy, fp32
  -> fp8 through torch's cast) around each launch. Tests parametrised with the ``cpu`` device run here; ``cuda``
  ones are skipped by the shared conftest (marker ``gpu``).
- GPU (``GRADER_GPU=1`` and CUDA visible): the kernel compiles natively in the subject; ``cuda`` cases run as CUDA.
  No machine here compiles for a ROCm GPU, so the ROCm cases still run on the ``cpu`` device through the
  corrected interpreter (switched on in the subject for those launches only, on a copy of the module whose
  kernels are interpreted); ``cpu`` cases as CUDA are skipped as a variant (the ``cuda`` one runs).

Every skip is decided here, from what the judge measures itself: the run's mode, the interpreter corrections
checked on the judge's own probe kernels (``kv_probe.py``), and the kernel's source read as text. Nothing a
probe answers turns into a skip: a launch that raises fails its test.
"""

from __future__ import annotations

import os

import pytest

from rubric_support import gpu_enabled, load_beside


GPU_RUN = gpu_enabled()
# A CPU run gets TRITON_INTERPRET from the grader (judge and subject alike); a GPU run interprets its ROCm cases.
INTERPRETER_ON = GPU_RUN or os.environ.get("TRITON_INTERPRET") == "1"

shim = load_beside(__file__, "kv_interp_shim")
PLATFORMS = load_beside(__file__, "kv_cases").PLATFORMS

PROBE = "int8_kv_probes.store_per_token_head"


@pytest.fixture(scope="session")
def interpreter_fault() -> str | None:
    """Measured in the judge: why the corrected interpreter cannot stand for a GPU here (the ``cpu`` cases are
    then skipped as an environment matter), or None when it rounds and converts like the hardware."""
    if not INTERPRETER_ON:
        return "environment: the Triton interpreter is off in this run and no GPU is in use"
    import torch

    x = torch.tensor([-31.6, -2.5, -1.5, -0.6, 0.5, 1.5, 2.5, 3.3], dtype=torch.float32)
    r = torch.empty_like(x)
    e = torch.empty_like(x)
    f = torch.empty(8, dtype=torch.float8_e4m3fn)
    with shim.interpreting():
        try:
            probe = load_beside(__file__, "kv_probe")
        except Exception as exc:  # pragma: no cover - environment
            return f"environment: Triton is not importable for the CPU interpreter: {exc!r}"
        shim.install()
        try:
            probe.probe_rounding[(1,)](x, r, e, f, 8)
        except Exception as exc:
            return f"environment: the corrected Triton interpreter cannot run its probe kernel: {exc!r}"
        finally:
            shim.uninstall()
    want_round = torch.sign(x) * torch.floor(x.abs() + 0.5)
    ok = (
        torch.equal(r, want_round)
        and torch.equal(e, torch.round(x))
        and torch.equal(f.view(torch.uint8), shim.torch_fp8_cast(x, torch.float8_e4m3fn).view(torch.uint8))
    )
    if not ok:
        return "environment: the Triton interpreter's libdevice/fp8 corrections do not hold on this install"
    return None


class KVStore:
    """Drives ``triton_reshape_and_cache_flash_per_token_head_quant`` in the subject on small tensors."""

    INT8_SENTINEL = 77
    FP8_SENTINEL_BYTE = 0x11
    SCALE_SENTINEL = -3.0

    def __init__(self, subject, interpreter_fault: str | None):
        self.subject = subject
        self.interpreter_fault = interpreter_fault

    def runnable(self, device: str, platform: str) -> None:
        """Skip, with the reason, where this run cannot give evidence for ``device`` as ``platform``."""
        if device == "cpu" and GPU_RUN and platform == "cuda":
            pytest.skip("variant: this run compiles Triton for the GPU, where the CUDA variant of this check runs")
        if device == "cpu" and self.interpreter_fault:
            pytest.skip(self.interpreter_fault)
        if device == "cuda" and not GPU_RUN:  # pragma: no cover - the shared conftest skips these already
            pytest.skip("environment: no CUDA GPU in this run")
        if device == "cuda" and platform != "cuda":
            pytest.skip(f"variant: {platform} is emulated through the interpreter only, in the CPU variant")

    def run(self, key, value, cache_dtype, device, slots=None, block_size=4, platform="cuda"):
        """Store ``key``/``value`` ([tokens, heads, dim], any float dtype, on CPU) as ``platform`` (``PLATFORMS``)
        and return CPU results.

        Returns ``(key_cache, value_cache, k_scale_cache, v_scale_cache, slots)`` where the caches are indexed
        ``[block, slot_in_block, head, dim]``.
        """
        import torch

        self.runnable(device, platform)
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
        sent = {"key_cache": kc, "value_cache": vc, "k_scale_cache": ks, "v_scale_cache": vs}
        got = self.subject.call(PROBE, key=key, value=value, slot_mapping=torch.tensor(slots, dtype=torch.long),
                                device=device, platform=PLATFORMS[platform], **sent)
        assert isinstance(got, dict) and set(got) == set(sent), f"the store probe answered {type(got).__name__}"
        for name, before in sent.items():
            after = got[name]
            assert isinstance(after, torch.Tensor) and after.dtype == before.dtype and after.shape == before.shape, (
                f"{name} came back as {getattr(after, 'dtype', type(after).__name__)} "
                f"{tuple(getattr(after, 'shape', ()))}, not {before.dtype} {tuple(before.shape)}")
        return got["key_cache"], got["value_cache"], got["k_scale_cache"], got["v_scale_cache"], slots


@pytest.fixture
def kv_store(subject, interpreter_fault):
    return KVStore(subject, interpreter_fault)
