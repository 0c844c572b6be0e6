"""Probes for int8-kv-rounding, run in the subject: what the candidate's per-token-head cache store writes.

The judge builds every tensor (inputs, caches filled with sentinels, scale caches, slot mapping) and decides what
the results mean; the probe only moves them to the device the judge names, runs the public launcher
``triton_reshape_and_cache_flash_per_token_head_quant`` on them, and sends the four written caches back. On a
CPU run (``TRITON_INTERPRET=1``) the interpreter corrections of ``int8_interp_shim`` are installed for the launch
and taken out afterwards; whatever the launch raises goes back to the judge as it is.
"""

from __future__ import annotations

import os

import int8_interp_shim
from probe_support import import_module

CACHE_MODULE = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"
LAUNCHER = "triton_reshape_and_cache_flash_per_token_head_quant"
OUTPUTS = ("key_cache", "value_cache", "k_scale_cache", "v_scale_cache")


def store_per_token_head(key, value, key_cache, value_cache, k_scale_cache, v_scale_cache, slot_mapping,
                         device: str = "cpu") -> dict:
    """Run the launcher on the judge's tensors (on ``device``); the caches it wrote, on CPU, by name."""
    import torch

    module = import_module(CACHE_MODULE)
    tensors = [t.to(device) for t in (key, value, key_cache, value_cache, k_scale_cache, v_scale_cache,
                                      slot_mapping)]
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if interpret:
        int8_interp_shim.install()
    try:
        getattr(module, LAUNCHER)(*tensors)
        if device == "cuda":
            torch.cuda.synchronize()
    finally:
        if interpret:
            int8_interp_shim.uninstall()
    return {name: t.cpu() for name, t in zip(OUTPUTS, tensors[2:6])}
