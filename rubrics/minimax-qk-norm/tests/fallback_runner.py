"""Subprocess: run forward_qkv with Triton unavailable and report per-case results as JSON.

Usage: python fallback_runner.py <sim_path> <device> <cases_json>
Triton is made unimportable before anything else (``sys.modules["triton"] = None``), so vLLM's HAS_TRITON
is false and ``vllm.triton_utils`` hands out placeholders, as on a platform without Triton. The fused
all-reduce op is absent on these machines as well (no compiled vLLM extension). Prints one JSON object:
{"env_error": str|None, "import_error": str|None, "has_triton": bool, "cases": {name: [problems]}}.
"""

import json
import os
import sys
import traceback
from pathlib import Path

sys.modules["triton"] = None  # Triton unavailable
for _n in list(sys.modules):
    if _n.startswith("triton."):
        sys.modules[_n] = None
os.environ["TORCHDYNAMO_DISABLE"] = "1"
os.environ.pop("TRITON_INTERPRET", None)


def main():
    tree = os.environ.get("GRADER_VLLM_TREE")
    if tree:
        sys.path.insert(0, tree)
    # This process does not load rubrics/conftest.py: install its stand-ins here (without them vLLM does not
    # import on a GPU machine, or picks its CUDA platform in a CPU-evidence run).
    sys.path.append(str(Path(__file__).resolve().parents[2]))
    import vllm_stand_ins
    from rubric_support import load_beside

    vllm_stand_ins.prepare_process()
    sim_path, device, cases_json = sys.argv[1], sys.argv[2], sys.argv[3]
    out = {"env_error": None, "import_error": None, "has_triton": None, "cases": {}}
    try:
        import torch

        sim = load_beside(sim_path, "qknorm_sim")
        import vllm.config  # noqa: F401
        import vllm.distributed.parallel_state  # noqa: F401
        import vllm.triton_utils as tu

        out["has_triton"] = bool(tu.HAS_TRITON)
    except Exception:
        out["env_error"] = traceback.format_exc()[-3000:]
        print(json.dumps(out))
        return
    with sim.rms_norm_tp_module(out) as mod:
        if mod is None:
            print(json.dumps(out))
            return
        dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
        for case in json.loads(cases_json):
            name = case["name"]
            try:
                res, inputs = sim.simulate_forward_qkv(
                    case["tokens"], case["q"], case["kv"], case["tp"], dtypes[case["dtype"]],
                    device=device, eps=case["eps"], seed=case.get("seed", 0),
                )
                out["cases"][name] = sim.check_against_reference(
                    res, inputs, case["eps"], case["tol"], case["tol"]
                )
            except Exception:
                out["cases"][name] = ["raised: " + traceback.format_exc()[-2000:]]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
