"""The faked GPUs the probes of rocm-mx-emulation play, as plain data (judge side)."""

from __future__ import annotations


def rocm(arch: str, aiter: bool = False, features: str = "") -> dict:
    """A ROCm GPU; ``features`` is the target-feature suffix torch's arch name carries (":sramecc+:xnack-"), which
    vLLM's ``_GCN_ARCH`` holds when amdsmi cannot answer."""
    device = {"kind": "rocm", "arch": arch, "aiter": aiter}
    if features:
        device["features"] = features
    return device


def cuda(cap=(9, 0)) -> dict:
    return {"kind": "cuda", "cap": list(cap)}


def of(plat) -> dict:
    """``("rocm", "gfx942")`` or ``("cuda", (9, 0))`` as a device."""
    kind, where = plat
    return rocm(where) if kind == "rocm" else cuda(where)
