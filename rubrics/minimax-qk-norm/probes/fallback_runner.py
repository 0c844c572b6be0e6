"""Subprocess (started by the probe ``qknorm_probes.fallback`` inside the subject): forward_qkv with Triton
unavailable, on the judge's per-rank inputs.

Usage: python fallback_runner.py <device> <cases.pt> <results.pt>, with the patched tree's import root and the
probes folder on PYTHONPATH. Triton is made unimportable before anything else (``sys.modules["triton"] = None``),
so vLLM's HAS_TRITON is false and ``vllm.triton_utils`` hands out placeholders, as on a platform without Triton.
The fused all-reduce op is absent on these machines as well (no compiled vLLM extension). Writes (torch.save,
tensors and plain data only) ``{"env_error": str|None, "import_error": str|None, "has_triton": bool|None,
"cases": {name: run_ranks observations | {"raised": traceback}}}``; it decides nothing.
"""

import os
import sys
import traceback

sys.modules["triton"] = None  # Triton unavailable
for _n in list(sys.modules):
    if _n.startswith("triton."):
        sys.modules[_n] = None
os.environ["TORCHDYNAMO_DISABLE"] = "1"
os.environ.pop("TRITON_INTERPRET", None)


def main():
    # This process is not the subject: install the stand-ins the subject has (without them vLLM does not import
    # on a GPU machine, or picks its CUDA platform in a CPU-evidence run).
    import vllm_stand_ins

    vllm_stand_ins.prepare_process()
    device, cases_path, results_path = sys.argv[1], sys.argv[2], sys.argv[3]
    out = {"env_error": None, "import_error": None, "has_triton": None, "cases": {}}
    import torch

    try:
        import qknorm_sim
        import vllm.config  # noqa: F401
        import vllm.distributed.parallel_state  # noqa: F401
        import vllm.triton_utils as tu

        out["has_triton"] = bool(tu.HAS_TRITON)
    except Exception:
        out["env_error"] = traceback.format_exc()[-3000:]
        torch.save(out, results_path)
        return
    with qknorm_sim.rms_norm_tp_module(out) as mod:
        if mod is None:
            torch.save(out, results_path)
            return
        for case in torch.load(cases_path, weights_only=True):
            try:
                on = lambda ts: [t.to(device) for t in ts]  # noqa: E731
                obs = qknorm_sim.run_ranks(
                    mod, on(case["qkv"]), on(case["q_weight"]), on(case["k_weight"]), case["q_size"],
                    case["kv_size"], case["eps"],
                )
                if obs["outputs"] is not None:  # back on the CPU: the subject loads these files
                    obs["outputs"] = [[t.cpu() if isinstance(t, torch.Tensor) else t for t in out]
                                      for out in obs["outputs"]]
                out["cases"][case["name"]] = obs
            except Exception:
                out["cases"][case["name"]] = {"raised": traceback.format_exc()[-2000:]}
    torch.save(out, results_path)


if __name__ == "__main__":
    main()
