"""The shared claim reader (``rubrics/claims_grammar.py``), with vit-fp8-blackwell's truth, over a table of
refusal messages an agent's fix could raise: every true one reads with no problem, every false one with at least
one. The truth: FP8 ViT attention runs on compute capability 10.0 (SM100) or newer with cuDNN 9.17.1 or newer and
the FlashInfer ViT backend. Each row is the device's capability (major * 10 + minor), its cuDNN and the message.
The helper is loaded by path; it does not import vLLM.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

CLAIMS = Path(__file__).resolve().parents[2] / "rubrics" / "claims_grammar.py"
VIT_TRUTH = {"required": 100, "without_cuda": False, "software": (("cudnn", (9, 17, 1)),), "must_name_requirement": True}


@pytest.fixture(scope="module")
def claims():
    spec = importlib.util.spec_from_file_location("_selftest_vit_claims", CLAIMS)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


# What a correct fix may say: plain and terse requirements, minimums in many spellings, the device reported,
# older hardware refused, a double negation that states the need, a list in a parenthesis.
TRUE_MESSAGES = [
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer.'),
    (90, '9.17.1', 'fp8 vit attn: needs sm_100+'),
    (90, '9.17.1', 'Requires compute capability >= 10.0 (Blackwell).'),
    (90, '9.17.1', "mm_encoder_attn_dtype='fp8' is restricted to GPUs with compute capability 10.0 or higher."),
    (90, '9.17.1', 'FP8 ViT attention needs at minimum a Blackwell-class GPU (SM100).'),
    (90, '9.17.1', 'FP8 encoder attention is unavailable on Hopper (SM90); it requires Blackwell (SM100+).'),
    (90, '9.17.1', "Hopper GPUs lack cuDNN's FP8 SDPA with bf16 output; use a Blackwell or newer GPU."),
    (90, '9.17.1', 'This GPU (cc 9.0) is not supported: FP8 ViT attention requires cc 10.0 or newer.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer (e.g. B200, GB200, B300, RTX 5090).'),
    (90, '9.17.1', 'FP8 ViT attention is supported on compute capability 10.x and above.'),
    (90, '9.17.1', 'FP8 ViT attention is not available before Blackwell (SM100); detected compute capability 9.0.'),
    (90, '9.17.1', 'requires SM >= 100, cuDNN >= 9.17.1 and the FlashInfer cuDNN backend'),
    (100, '9.16.0', 'FP8 ViT attention requires cuDNN >= 9.17.1 (found 9.16.0) on a Blackwell (SM100+) GPU.'),
    (120, '9.17.1', 'The FlashInfer ViT backend is unavailable on this platform; FP8 ViT attention '
     'needs SM100 or newer '
     'with FlashInfer and cuDNN 9.17.1+.'),
    (90, '9.17.1', 'Without a Blackwell-or-newer GPU (SM100+), FP8 ViT attention cannot run.'),
    (90, '9.17.1', 'Pre-Blackwell GPUs (Hopper, Ada, Ampere) are not supported; use SM100 or newer.'),
    (90, '9.17.1', 'FP8 ViT attention is not supported on GPUs older than SM100.'),
    (90, '9.17.1', 'FP8 ViT attention requires at least SM100.'),
    (90, '9.17.1', 'FP8 ViT attention works only on Blackwell and later architectures (compute capability 10.0+).'),
    (90, '9.17.1', 'Your GPU (NVIDIA H100, sm_90) does not support FP8 ViT attention, which requires SM100 or newer.'),
    (90, '9.17.1', 'FP8 ViT attention is Blackwell-only (SM100 and later).'),
    (90, '9.17.1', 'FP8 ViT attention requires an SM100-or-newer GPU; got sm_90a.'),
    (86, '9.17.1', 'FP8 ViT attention requires a GPU with compute capability 10.0 or above; this device has 8.6.'),
    (75, '9.17.1', 'Unsupported GPU (sm75): FP8 ViT attention requires Blackwell or a later architecture.'),
    (90, '9.17.1', 'FP8 ViT attention is absent on Hopper and earlier GPUs and needs SM 10.0+.'),
    (90, '9.17.1', 'FP8 ViT attention needs a compute capability of 10.0 or greater (Blackwell and '
     'newer); Hopper is not '
     'supported.'),
    (90, '9.17.1', 'FP8 ViT attention requires Blackwell; your Hopper GPU (cc 9.0) is not supported.'),
    (90, '9.17.1', 'FP8 ViT attention requires compute capability 10.0+, got 9.0.'),
    (90, '9.17.1', 'Compute capability 9.0 < 10.0: FP8 ViT attention needs Blackwell.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; SM90 is insufficient.'),
    (90, '9.17.1', 'This feature targets SM100+, not SM90.'),
    (90, '9.17.1', 'FP8 ViT attention needs a B200-class GPU or newer.'),
    (90, '9.17.1', 'FP8 ViT attention requires compute capability 10.0 or later; sm_90 lacks the '
     'required cuDNN kernel.'),
    (90, '9.17.1', 'FP8 ViT attention needs sm_100+ (Blackwell); H100/H200 are unsupported.'),
    (90, '9.17.1', 'Not supported: this GPU is older than compute capability 10.0.'),
    (100, '9.16.0', 'cuDNN 9.16.0 is too old: FP8 ViT attention needs cuDNN 9.17.1+ on SM100 or newer.'),
    (120, '9.17.1', 'The FlashInfer ViT backend is not available on this GPU (SM120); FP8 ViT '
     'attention needs it and an '
     'SM100+ GPU.'),
    (90, '9.17.1', 'FP8 ViT attention needs SM100 or newer; on Hopper, use bf16 ViT attention instead.'),
    (90, '9.17.1', 'FP8 ViT attention requires compute capability 10 or newer.'),
    (90, '9.17.1', 'FP8 ViT attention requires a Blackwell (or newer) GPU.'),
    (90, '9.17.1', 'FP8 ViT attention runs on Blackwell GPUs onwards; Ada and Hopper fall back to bf16.'),
    (90, '9.17.1', 'Hopper, Ada and Ampere GPUs are not supported; FP8 ViT attention needs SM100 or newer.'),
    (90, '9.17.1', 'FP8 ViT attention: Blackwell (SM100+) only, not Hopper.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; not available on ROCm (MI300X) or XPU.'),
    (100, '9.16.0', 'FP8 ViT attention needs an SM100+ GPU (Blackwell or newer) with cuDNN 9.17.1+ '
     'and the FlashInfer ViT '
     'backend; Hopper, Ada and older GPUs cannot run it (this GPU: compute capability 10.0).'),
    (90, '9.17.1', 'FP8 ViT attention requires compute capability ten or newer.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; found torch 2.9 and cuDNN 9.17.1 here.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer, e.g. B200, GB200 or RTX 5090.'),
    (90, '9.17.1', 'FP8 ViT attention needs a Blackwell-or-newer GPU such as B200, B300 or RTX PRO 6000.'),
    (90, '9.17.1', 'FP8 ViT attention needs compute capability ten point zero or newer; nine point zero is not '
     'supported.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM one hundred or newer, the FlashInfer cuDNN backend and cuDNN '
     '9.17.1+.'),
]

# What contradicts the truth or names no requirement: older hardware as what runs it (as a minimum, a range, a
# list, a part, a family, after "not excluded" or "without"), SM100+ hardware refused or bounded, only a segment
# or a part of SM100+, hardware without CUDA, a wrong cuDNN version, an SM100+ device called old.
FALSE_MESSAGES = [
    (90, '9.17.1', 'FP8 ViT attention requires Hopper and later.'),
    (90, '9.17.1', 'FP8 ViT attention requires sm_90a or newer.'),
    (90, '9.17.1', 'FP8 ViT attention requires cc 9.0+ (Blackwell recommended).'),
    (90, '9.17.1', 'FP8 ViT attention is supported on compute capability 9.x and 10.x.'),
    (90, '9.17.1', 'FP8 ViT attention is data-center Blackwell only (B200/GB200/B300).'),
    (90, '9.17.1', 'FP8 ViT attention is restricted to SM100 GPUs.'),
    (90, '9.17.1', 'FP8 ViT attention requires newer hardware.'),
    (90, '9.17.1', 'FP8 ViT attention is unavailable on GB200; it needs SM100 or newer.'),
    (90, '9.17.1', 'Blackwell GPUs lack the FP8 kernels; Hopper (SM90) or newer is required.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer and is not supported on Blackwell '
     'consumer GPUs (SM120).'),
    (90, '9.17.1', 'FP8 ViT attention requires Blackwell; GPUs with compute capability 8.9 and up run it with cuDNN '
     '9.17.1.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer, torch >= 2.9 and cuDNN 9.18.0.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM 10.x (B100/B200); SM 12.x is not supported.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; it is also available on H200 with cuDNN 9.17.1.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer (Hopper is not excluded).'),
    (90, '9.17.1', 'FP8 ViT attention requires a GPU newer than Ada (sm89).'),
    (90, '9.17.1', 'FP8 ViT attention requires Blackwell; Jetson Thor and RTX 50-series are unsupported.'),
    (90, '9.17.1', 'FP8 ViT attention requires Blackwell (SM100-SM103).'),
    (90, '9.17.1', 'FP8 ViT attention is supported between compute capability 10.0 and 12.0.'),
    (90, '9.17.1', 'FP8 ViT attention requires a Grace Hopper or Blackwell superchip (GH200, GB200).'),
    (90, '9.17.1', 'FP8 ViT attention needs at minimum an SM90 GPU; SM100 is recommended.'),
    (90, '9.17.1', 'FP8 ViT attention requires cc 9.0 or newer with cuDNN 9.17.1; Blackwell is preferred.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer (Hopper and Blackwell with FlashInfer >= 0.5).'),
    (100, '9.16.0', 'FP8 ViT attention requires SM100 or newer; this Blackwell GPU is below the minimum.'),
    (120, '9.17.1', 'FP8 ViT attention requires SM100 or newer and is unavailable on 12.x GPUs.'),
    (90, '9.17.1', 'FP8 ViT attention is supported on Blackwell data-center GPUs only (SM100).'),
    (90, '9.17.1', 'FP8 ViT attention requires an MI300X or a Blackwell GPU (SM100+).'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; sm_90a GPUs can use it too.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; compute capability 9.0 is also fine.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100+ and cuDNN at least 9.16.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; SM120 is insufficient.'),
    (90, '9.17.1', 'Hopper and Ada are supported; Blackwell (SM100+) is recommended.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer, not SM120.'),
    (90, '9.17.1', 'Only Hopper and newer GPUs run FP8 ViT attention; Blackwell (SM100) is fastest.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer and is not supported on SM110 (Jetson Thor).'),
    (90, '9.17.1', 'FP8 ViT attention requires at least Hopper (SM90); Blackwell recommended.'),
    (100, '9.16.0', 'FP8 ViT attention requires Blackwell (SM100+) and cuDNN >= 9.17.1; this GPU (SM100) is too old.'),
    (120, '9.17.1', 'FP8 ViT attention requires SM100 or newer; it is not supported on SM120 GPUs.'),
    (90, '9.17.1', 'FP8 ViT attention is not supported on Hopper without cuDNN 9.17.1; Blackwell '
     '(SM100+) needs nothing '
     'more.'),
    (90, '9.17.1', 'FP8 ViT attention requires Hopper-class or better GPUs.'),
    (90, '9.17.1', 'FP8 ViT attention requires the Hopper generation or later.'),
    (90, '9.17.1', 'FP8 ViT attention needs NVIDIA Hopper (or newer).'),
    (90, '9.17.1', 'FP8 ViT attention requires SM90 at least; SM100 preferred.'),
    (90, '9.17.1', 'FP8 ViT attention requires compute capability major >= 9.'),
    (90, '9.17.1', 'FP8 ViT attention requires a 9.x-or-newer GPU; Blackwell is fastest.'),
    (90, '9.17.1', 'FP8 ViT attention requires Blackwell; from Hopper onwards it works with cuDNN 9.17.1.'),
    (90, '9.17.1', 'Blackwell, Hopper and Ada are supported for FP8 ViT attention.'),
    (90, '9.17.1', 'FP8 ViT attention is available on B200, H200 and RTX 5090.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100+; gfx942 and MI300X are also supported.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100-SM103 (Blackwell), the FlashInfer cuDNN backend '
     'and cuDNN >= 9.17.1; '
     'this device reports compute capability 9.0.'),
    (90, '9.17.1', 'FP8 ViT attention needs a GPU of compute capability nine or newer (Blackwell recommended).'),
    (90, '9.17.1', 'FP8 ViT attention is supported on B200, GB200 and B300 GPUs.'),
    (90, '9.17.1', 'FP8 ViT attention runs on B200 GPUs with cuDNN 9.17.1.'),
    (90, '9.17.1', 'FP8 ViT attention requires a Blackwell GPU (SM100 or newer) and CUDA 12.9 or newer.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100+, torch >= 2.10 and FlashInfer >= 0.6.'),
    (90, '9.17.1', 'FP8 ViT attention requires a data-center GPU of compute capability 10.0 or newer.'),
    (90, '9.17.1', 'FP8 ViT attention runs on the compute capability ten series only.'),
    (90, '9.17.1', 'FP8 ViT attention requires a tenth-generation GPU.'),
    (90, '9.17.1', 'FP8 ViT attention needs SM100+; capability nine point zero works as well once cuDNN ships the '
     'kernel.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM100 or newer; ninth-generation GPUs run it too.'),
    (90, '9.17.1', 'FP8 ViT attention requires SM120 or newer (RTX 5090, RTX PRO 6000).'),
    (90, '9.17.1', 'FP8 ViT attention requires compute capability twelve or newer.'),
    (100, '9.16.0', 'FP8 ViT attention needs cuDNN 9.17.1+ and the NVIDIA driver 575.0 or newer.'),
]


def problems_of(claims, device, cudnn, message):
    return claims.message_problems(message, device, claims.Truth(**VIT_TRUTH),
                                   {"cudnn": tuple(int(part) for part in cudnn.split("."))})


def test_the_table_is_large_and_balanced():
    assert len(TRUE_MESSAGES) >= 20 and len(FALSE_MESSAGES) >= 20


@pytest.mark.parametrize("device,cudnn,message", TRUE_MESSAGES)
def test_a_true_message_has_no_problem(claims, device, cudnn, message):
    assert problems_of(claims, device, cudnn, message) == []


@pytest.mark.parametrize("device,cudnn,message", FALSE_MESSAGES)
def test_a_false_message_has_a_problem(claims, device, cudnn, message):
    assert problems_of(claims, device, cudnn, message)
