"""The faked GPUs the probes of rocm-mx-emulation play, as plain data (judge side)."""

from __future__ import annotations


def rocm(arch: str, aiter: bool = False) -> dict:
    return {"kind": "rocm", "arch": arch, "aiter": aiter}


def cuda(cap=(9, 0)) -> dict:
    return {"kind": "cuda", "cap": list(cap)}


def of(plat) -> dict:
    """``("rocm", "gfx942")`` or ``("cuda", (9, 0))`` as a device."""
    kind, where = plat
    return rocm(where) if kind == "rocm" else cuda(where)
