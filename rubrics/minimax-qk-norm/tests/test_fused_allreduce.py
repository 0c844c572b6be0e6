"""Hidden tests for minimax-qk-norm: the fused all-reduce + RMSNorm branch of forward_qkv.

Where vLLM has its compiled ``minimax_allreduce_rms_qk`` op and each tp > 1 layer got a Lamport workspace when it was
built, the base hands batches of at most ``MINIMAX_QK_NORM_MAX_TOKEN_NUM`` (2048) tokens to that op and every other
batch to the unfused path; where the workspace cannot be made (GPUs without P2P) the layer still builds and uses the
unfused path. Neither grading machine has the op, so these checks run in a subject on the rubric's
``fused-allreduce`` platform, whose probe (``qknorm_fused``) registers stand-ins for the op and the workspace before
the candidate's module is imported. This module decides: the gathered outputs are the full-width fp32 RMSNorm (as
everywhere else), and the op is called by every rank, with its own rank and the world, exactly where the base calls
it (tp > 1, a workspace, 1 to 2048 tokens; a zero-token batch may take either path), and nowhere else.
"""

from __future__ import annotations

import pytest
import torch

from rubric_support import load_beside

qk = load_beside(__file__, "test_minimax_qk_norm")
device = qk.device

MAX_FUSED_TOKENS = 2048  # the base's MINIMAX_QK_NORM_MAX_TOKEN_NUM: the fused op's limit, and its workspace's
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
PRECISION = {FP32: "fp32", FP16: "fp16", BF16: "bf16"}


def _token_case(tokens: int) -> str:
    return {0: "0", 1: "1"}.get(tokens, "large" if tokens > 16 else ("odd" if tokens % 2 else "even"))


def _case(name, tokens, tp, dtype, eps=None, workspace_fails=False):
    return {"name": name, "tokens": tokens, "tp": tp, "dtype": dtype, "eps": eps, "workspace_fails": workspace_fails}


# A covering set: each tp with each dtype and one of 1, odd and even token counts (bf16 runs on the fused op only,
# torch code, so the interpreter's bf16 does not enter); zero tokens; the op's limit (2048 tokens, taken) and one past
# it (not taken); the norms' own epsilon 1e-2 on small activations; a workspace that cannot be made.
FUSED_CASES = [
    _case("tp2_fp32_t1", 1, 2, FP32), _case("tp2_fp16_t7", 7, 2, FP16), _case("tp2_bf16_t6", 6, 2, BF16),
    _case("tp4_fp16_t1", 1, 4, FP16), _case("tp4_bf16_t7", 7, 4, BF16), _case("tp4_fp32_t6", 6, 4, FP32),
    _case("tp8_bf16_t1", 1, 8, BF16), _case("tp8_fp32_t7", 7, 8, FP32), _case("tp8_fp16_t6", 6, 8, FP16),
    _case("tp2_fp16_t0", 0, 2, FP16), _case("tp8_fp32_t0", 0, 8, FP32),
    _case("tp2_fp16_t2048", MAX_FUSED_TOKENS, 2, FP16), _case("tp2_fp16_t2049", MAX_FUSED_TOKENS + 1, 2, FP16),
    _case("tp4_fp32_t5_eps1e-2", 5, 4, FP32, eps=1e-2), _case("tp2_fp16_t3_eps1e-2", 3, 2, FP16, eps=1e-2),
    _case("tp1_fp16_t5", 5, 1, FP16), _case("tp1_fp32_t3", 3, 1, FP32),
    _case("tp2_fp16_t3_no_workspace", 3, 2, FP16, workspace_fails=True),
    _case("tp4_fp32_t5_no_workspace", 5, 4, FP32, workspace_fails=True),
]
Q_PER_RANK, KV_PER_RANK = 32, 8


def fused_expected(case: dict) -> bool | None:
    """Whether the base calls the fused op for this case (None: a zero-token batch, either path is right)."""
    if case["tp"] == 1 or case["workspace_fails"]:
        return False
    if case["tokens"] == 0:
        return None
    return case["tokens"] <= MAX_FUSED_TOKENS


@pytest.fixture(scope="module")
def fused_results(subject_on, device):
    """One run of the fused-op probe over every case, in a subject on the rubric's ``fused-allreduce`` platform."""
    gen = qk._module_generator("fused")
    inputs, cases = {}, []
    for c in FUSED_CASES:
        q, k, v, qw, kw = qk.make_inputs(gen, c["tokens"], Q_PER_RANK * c["tp"], KV_PER_RANK * c["tp"])
        scale = 0.05 if c["eps"] else 1.0
        inputs[c["name"]] = qk._cast((q * scale, k * scale, v, qw, kw), c["dtype"])
        cases.append({"name": c["name"], "workspace_fails": c["workspace_fails"],
                      **qk.shard(inputs[c["name"]], c["tp"], c["eps"] or qk.EPS)})
    report = subject_on("fused-allreduce").call("qknorm_fused.run", cases=cases, device=device, timeout=600)
    return {"report": report, "inputs": inputs}


def fused_problems(fused_results, case: dict) -> list[str]:
    """What is wrong with one case: its values, and whether the fused op was called where the base calls it."""
    report = fused_results["report"]
    assert isinstance(report, dict), f"the fused-op probe answered {type(report).__name__}, not its report"
    assert not report.get("env_error"), "the fused-op stand-ins could not be installed:\n" + report["env_error"]
    assert not report.get("import_error"), "rms_norm_tp does not import beside the fused op:\n" + report["import_error"]
    obs = (report.get("cases") or {}).get(case["name"])
    if obs is None:
        return ["case not run"]
    tp, problems = case["tp"], []
    calls = obs.get("fused_calls") or []
    expected = fused_expected(case)
    if expected and (sorted({c[0] for c in calls}) != list(range(tp)) or any(c[1] != tp for c in calls)):
        problems.append(f"the fused op was not called by every rank with its rank and world {tp}: calls "
                        f"[rank, nranks, tokens] {calls[:8]} (the base calls it at tp > 1 for 1 to "
                        f"{MAX_FUSED_TOKENS} tokens when the workspace exists)")
    if expected is False and calls:
        problems.append(f"the fused op was called {len(calls)} time(s) where the base does not call it "
                        f"(tp_world {tp}, {case['tokens']} tokens, workspace "
                        f"{'unavailable' if case['workspace_fails'] else 'present'}): {calls[:4]}")
    if "raised" in obs:
        return problems + ["raised: " + str(obs["raised"])]
    if tp == 1 and obs.get("total_calls"):
        problems.append(f"{obs['total_calls']} all-reduce call(s) at tp_world 1")
    return problems + qk.check_observations(obs, fused_results["inputs"][case["name"]], tp, case["dtype"],
                                            qk.TOL[case["dtype"]], case["eps"] or qk.EPS)


def _marks(c: dict):
    marks = {"precision": PRECISION[c["dtype"]], "tp": str(c["tp"]),
             "tokens": _token_case(c["tokens"]) if c["tp"] > 1 else "several"}
    if c["tp"] > 1:
        marks.update(evidence="fused-op", eps="own-eps" if c["eps"] else "default-eps", width="narrow",
                     magnitude="unit", workspace="unavailable" if c["workspace_fails"] else "present")
    return pytest.mark.cases(**marks)


def _params(tps):
    return [pytest.param(c, id=c["name"], marks=_marks(c)) for c in FUSED_CASES if c["tp"] in tps]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("case", _params((2, 4, 8)))
def test_fused_allreduce_branch(fused_results, case):
    """Beside the fused all-reduce + RMSNorm op, forward_qkv calls it where the base does (every rank, tp > 1, a
    workspace, 1..2048 tokens) and nowhere else, and its gathered result is the full-width RMSNorm."""
    problems = fused_problems(fused_results, case)
    assert not problems, f"{case['name']}: " + "; ".join(problems)


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("case", _params((1,)))
def test_tp1_beside_fused_op(fused_results, case):
    """At tp_world 1 the fused op (which needs a world of 2 or more) is not called and no all-reduce is issued,
    also where the op exists; the result is the RMSNorm."""
    problems = fused_problems(fused_results, case)
    assert not problems, f"{case['name']}: " + "; ".join(problems)
