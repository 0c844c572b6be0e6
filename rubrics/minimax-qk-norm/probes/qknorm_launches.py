"""Probe for minimax-qk-norm, run in the subject: the launch options of every Triton kernel ``forward_qkv``
launches, with what ``qknorm_probes.simulate`` observes on the same run.

Under the Triton interpreter the launch options (``num_warps`` and the like) are accepted and dropped, so a launch
the GPU backend refuses runs here as if it were fine. Recording the options each launch asks for lets the judge
decide, on CPU, whether the GPU would accept them. Nothing here decides that.
"""

from __future__ import annotations

import qknorm_probes
from probe_support import Patches

_OPTIONS = ("num_warps", "num_stages", "num_ctas")


def _launch_classes() -> list:
    """The classes whose ``run`` a ``kernel[grid](...)`` launch goes through: the compiled one and the
    interpreter's (an autotuned kernel reaches them too, with its config's options)."""
    from triton.runtime import interpreter, jit

    return [jit.JITFunction, interpreter.InterpretedFunction]


def _option_value(value):
    return int(value) if isinstance(value, int) or hasattr(value, "__index__") else repr(value)


def _recording(real_run, launches: list):
    def run(self, *args, **kwargs):
        fn = getattr(self, "fn", None)
        launches.append({"kernel": getattr(fn, "__name__", type(self).__name__),
                         **{k: _option_value(kwargs[k]) for k in _OPTIONS if k in kwargs}})
        return real_run(self, *args, **kwargs)

    return run


def simulate_launches(**simulate_args) -> dict:
    """``qknorm_probes.simulate`` with every Triton launch recorded: ``launches`` lists, per launch, the kernel's
    name and the launch options it was given."""
    launches: list = []
    with Patches() as patches:
        for cls in _launch_classes():
            patches.set(cls, "run", _recording(cls.run, launches))
        obs = qknorm_probes.simulate(**simulate_args)
    obs["launches"] = launches
    return obs


def _grid_of(grid, kwargs: dict) -> list[int]:
    """A launch's grid as its three dimensions (a callable grid is given the launch's keyword arguments)."""
    dims = grid(kwargs) if callable(grid) else grid
    dims = tuple(int(d) for d in dims)
    return list(dims + (1,) * (3 - len(dims)))


def _grid_only(launches: list):
    def run(self, *args, grid, warmup=False, **kwargs):
        fn = getattr(self, "fn", None)
        launches.append({"kernel": getattr(fn, "__name__", type(self).__name__), "grid": _grid_of(grid, kwargs)})

    return run


def launch_grids(**simulate_args) -> dict:
    """``qknorm_probes.simulate`` with every Triton launch recorded and not run: ``launches`` lists, per launch,
    the kernel's name and its grid's three dimensions. The outputs are whatever the op's allocations held (no
    kernel ran): only the grids are observations here."""
    launches: list = []
    with Patches() as patches:
        for cls in _launch_classes():
            patches.set(cls, "run", _grid_only(launches))
        obs = qknorm_probes.simulate(**simulate_args)
    return {"launches": launches, "total_calls": obs["total_calls"]}
