"""Per-task setup for the minimax-qk-norm hidden tests.

Runs before the candidate's vLLM modules are imported:
- Without GPU evidence, Triton kernels run under the interpreter on CPU tensors (TRITON_INTERPRET=1), and
  CUDA_VISIBLE_DEVICES="" keeps vLLM's HAS_TRITON true without a GPU driver.
- TorchDynamo is disabled in this process (TORCHDYNAMO_DISABLE=1): a ``torch.compile``-decorated function
  runs its own eager ops, same semantics, without a ~12 s CPU compile per specialization. The speed test
  (GPU only) runs in a fresh subprocess where compilation is on.
- A minimal current vLLM config (``custom_ops=["all"]``) so CustomOp layers can be built outside an engine.
- The TP group is faked per test by ``qknorm_sim`` (loaded by path; tests run with --import-mode=importlib).
"""

from __future__ import annotations

import os

import pytest

from rubric_support import gpu_enabled, load_beside


GPU = gpu_enabled()
if not GPU:
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ["TORCHDYNAMO_DISABLE"] = "1"


@pytest.fixture(scope="session")
def sim():
    """The test-owned TP simulation helpers (qknorm_sim.py)."""
    return load_beside(__file__, "qknorm_sim")


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if GPU else "cpu"


@pytest.fixture(scope="session")
def _vllm_config():
    try:
        import torch._dynamo.config as dynamo_config

        dynamo_config.disable = True
        from vllm.config import CompilationConfig, set_current_vllm_config
    except Exception as e:  # the grader environment, not the candidate
        pytest.skip(f"environment: cannot import vLLM config machinery: {e!r}")
    import types

    cfg = types.SimpleNamespace(compilation_config=CompilationConfig(custom_ops=["all"]))
    with set_current_vllm_config(cfg):
        yield cfg


@pytest.fixture(scope="session")
def norm_mod(sim, _vllm_config):
    """The candidate's rms_norm_tp module, imported after the custom-op spy window is installed."""
    undo = sim.install_custom_op_window()
    try:
        from vllm.model_executor.layers.minimax_rms_norm import rms_norm_tp
    finally:
        undo()
    return rms_norm_tp
