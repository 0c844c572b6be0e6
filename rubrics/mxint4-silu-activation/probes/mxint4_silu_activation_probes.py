"""Probes for mxint4-silu-activation, run in the subject: what the FlashInfer TRT-LLM MxInt4 experts say they
support, and which WNA16 MoE backend the oracle picks, on a faked GPU. Observations only.

The fake platform is a real subclass of vLLM's ``Platform`` with ``_enum`` and a device capability set, so every
``is_cuda``/``is_rocm``/``is_device_capability_family``/``has_device_capability`` answer agrees with one state.
``is_flashinfer_mxint4_moe_available`` (which needs FlashInfer) is answered by the probe as the real helper answers
where FlashInfer is installed or not (``"flashinfer"`` of a case), in every loaded vLLM module that holds it (a tree
may import it at module level); whether the tree asks it is the tree's business. ``VLLM_BATCH_INVARIANT`` is set
per case (off unless the case turns it on). The experts' and the oracle's modules are imported anew wherever a case
plays another process state than the case before it (``_imported_on_the_platform_played``).
"""

from __future__ import annotations

import contextlib
import sys

from probe_support import Patches, import_module, install_platform, outcome_of, put_back

MODULE = "vllm.model_executor.layers.fused_moe.experts.trtllm_mxint4_moe"
ORACLE = "vllm.model_executor.layers.fused_moe.oracle.int_wna16"
AVAILABILITY = "vllm.model_executor.layers.quantization.utils.flashinfer_mxint4_moe"

# kind -> (PlatformEnum member name, device_name, device_type)
KINDS = {
    "cuda": ("CUDA", "cuda", "cuda"),
    "rocm": ("ROCM", "rocm", "cuda"),
    "xpu": ("XPU", "xpu", "xpu"),
    "cpu": ("CPU", "cpu", "cpu"),
    "tpu": ("TPU", "tpu", "tpu"),
    "oot": ("OOT", "oot", "oot"),
}


def public_names(module: str = MODULE) -> list[str]:
    """The public names ``module`` defines once imported (its import errors fail the probe)."""
    loaded = import_module(module)
    return sorted(name for name in vars(loaded) if not name.startswith("_"))


def activation_names() -> list[str]:
    """Every member name of the tree's ``MoEActivation``."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    return [member.name for member in MoEActivation]


def _make_platform(kind: str, capability):
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    enum_name, device_name, device_type = KINDS[kind]
    cap = None if capability is None else DeviceCapability(major=capability[0], minor=capability[1])

    def get_device_capability(cls, device_id: int = 0):
        return cap

    def get_device_name(cls, device_id: int = 0) -> str:
        return f"Fake {enum_name} device"

    attrs = {"_enum": getattr(PlatformEnum, enum_name), "device_name": device_name, "device_type": device_type,
             "get_device_capability": classmethod(get_device_capability),
             "get_device_name": classmethod(get_device_name)}
    return type(f"Fake{enum_name.title()}Platform", (Platform,), attrs)()


def _available(installed: bool, platform) -> bool:
    """The availability helper's answer as the real one gives it where FlashInfer's TRT-LLM MoE kernels are
    ``installed`` (and enabled): a CUDA GPU of the SM100 family is needed too."""
    return installed and platform.is_cuda() and platform.is_device_capability_family(100)


# name -> FusedMoEParallelConfig fields over the no-parallel config: plain tensor parallel, data parallel without
# expert parallel, expert parallel without data parallel (over the TP ranks: no all2all), expert parallel over the
# allgather/reduce-scatter all2all and over every other all2all backend of this vLLM that runs on CUDA
# (batched-format ones: DeepEP low latency, NIXL EP; standard-format ones: DeepEP high throughput and v2, naive,
# pplx, FlashInfer two-sided under both of its names and one-sided; MoRI needs ROCm's aiter, its config refuses
# CUDA), and EPLB.
_EP = {"dp_size": 2, "ep_size": 2, "use_ep": True}
PARALLEL = {
    "none": {},
    "tp2": {"tp_size": 2},
    "dp2": {"dp_size": 2},
    "dp2-ep-allgather": {**_EP, "all2all_backend": "allgather_reducescatter"},
    "dp2-ep-deepep": {**_EP, "all2all_backend": "deepep_low_latency"},
    "dp2-ep-deepep-ht": {**_EP, "all2all_backend": "deepep_high_throughput"},
    "dp2-ep-deepep-v2": {**_EP, "all2all_backend": "deepep_v2"},
    "dp2-ep-nixl": {**_EP, "all2all_backend": "nixl_ep"},
    "dp2-ep-naive": {**_EP, "all2all_backend": "naive"},
    "dp2-ep-pplx": {**_EP, "all2all_backend": "pplx"},
    "dp2-ep-flashinfer": {**_EP, "all2all_backend": "flashinfer_nvlink_two_sided"},
    "dp2-ep-flashinfer-all2allv": {**_EP, "all2all_backend": "flashinfer_all2allv"},
    "dp2-ep-flashinfer-one-sided": {**_EP, "all2all_backend": "flashinfer_nvlink_one_sided"},
    "ep2": {"ep_size": 2, "use_ep": True},
    "eplb": {"enable_eplb": True},
}


def _parallel_config(name: str):
    import dataclasses

    from vllm.model_executor.layers.fused_moe.config import FusedMoEParallelConfig

    return dataclasses.replace(FusedMoEParallelConfig.make_no_parallel(), **PARALLEL[name])


def _moe_config(case: dict):
    import torch

    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig, RoutingMethodType

    experts = case.get("num_experts", 8)
    return FusedMoEConfig(
        num_experts=experts,
        experts_per_token=case.get("top_k", 2),
        hidden_dim=case.get("hidden_dim", 512),
        intermediate_size=case.get("intermediate_size", 256),
        num_local_experts=experts,
        num_logical_experts=experts,
        moe_parallel_config=_parallel_config(case.get("parallel", "none")),
        activation=getattr(MoEActivation, case["activation"]),
        in_dtype=getattr(torch, case.get("dtype", "bfloat16")),
        device="cpu",
        routing_method=getattr(RoutingMethodType, case.get("routing", "Renormalize")),
        router_logits_dtype=getattr(torch, case["router_logits_dtype"]) if case.get("router_logits_dtype") else None,
        is_lora_enabled=bool(case.get("lora", False)),
    )


def _weight_key(name: str | None):
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    return None if name is None else getattr(q, name)


def _other_predicates(experts, case: dict) -> dict:
    """The experts' support predicates other than the activation one, for the case's weight key, routing method
    and router-logits dtype."""
    import torch

    from vllm.model_executor.layers.fused_moe.config import RoutingMethodType

    weight_key = _weight_key(case.get("weight_key", "kInt4Static32"))
    routing = getattr(RoutingMethodType, case.get("routing", "Renormalize"))
    logits_dtype = getattr(torch, case.get("router_logits_dtype", "bfloat16"))
    activation_key = _weight_key(case.get("activation_key"))
    return {"quant_scheme": bool(experts._supports_quant_scheme(weight_key, activation_key)),
            "routing": bool(experts._supports_routing_method(routing, weight_key, activation_key)),
            "router_logits_dtype": bool(experts._supports_router_logits_dtype(logits_dtype, routing)),
            "no_act_and_mul": bool(experts._supports_no_act_and_mul()),
            "expert_map": bool(experts.supports_expert_map(None)),
            "activation_format": getattr(experts.activation_format(), "name", "?")}


def _observe(case: dict) -> dict:
    """One case: ``{"site": "predicate"|"config"|"oracle"|"others", "activation": member name, "platform",
    "capability", "flashinfer": bool, "weight_key"/"activation_key": quant_utils names, "routing",
    "router_logits_dtype", "parallel": a PARALLEL name, "lora": bool, "batch_invariant": "on" or absent,
    "dtype", shape fields}``."""
    mod = import_module(MODULE)
    experts = mod.TrtLlmMxint4ExpertsMonolithic
    if case["site"] == "predicate":
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation

        return outcome_of(lambda: experts._supports_activation(getattr(MoEActivation, case["activation"])))
    if case["site"] == "others":
        return outcome_of(_other_predicates, experts, case)
    config = _moe_config(case)
    before = _config_state(config)
    seen = _observe_layer(case, experts, config)
    seen["config_changed"] = sorted(name for name, value in _config_state(config).items() if before.get(name) != value)
    return seen


def _config_state(config) -> dict:
    """Every field of the layer's ``FusedMoEConfig`` (and of its parallel config) as text: what a site must leave as
    it was given."""
    import dataclasses

    state = {f"parallel.{f.name}": repr(getattr(config.moe_parallel_config, f.name))
             for f in dataclasses.fields(config.moe_parallel_config)}
    state.update({f.name: repr(getattr(config, f.name)) for f in dataclasses.fields(config)
                  if f.name != "moe_parallel_config"})
    return state


def _observe_layer(case: dict, experts, config) -> dict:
    """The support check's or the oracle's answer for the layer ``config``."""
    weight_key = _weight_key(case.get("weight_key", "kInt4Static32"))
    if case["site"] == "config":
        import vllm.model_executor.layers.fused_moe.modular_kernel as mk

        def supported():
            ok, reason = experts.is_supported_config(experts, config, weight_key,
                                                     _weight_key(case.get("activation_key")),
                                                     mk.FusedMoEActivationFormat.Standard)
            return {"supported": bool(ok), "reason": None if reason is None else str(reason)[:500]}

        return outcome_of(supported)
    oracle = import_module(ORACLE)

    def select():
        backend, k_cls = oracle.select_wna16_moe_backend(config, weight_key)
        return {"backend": getattr(backend, "name", repr(backend)[:200]),
                "experts": getattr(k_cls, "__name__", repr(k_cls)[:200])}

    return outcome_of(select)


def _other_experts_answers(case: dict) -> dict:
    """``is_supported_config`` of every other ``FusedMoEExperts`` class of vLLM's experts package, for a layer of
    each ``MoEActivation`` with the case's weight key, each class's device check answered True (so that the shared
    check goes on to the activation and the rest): ``{"module.Class:ACTIVATION": outcome}``; a module that does not
    import answers ``{"module": outcome}``."""
    import importlib
    import inspect
    import pkgutil

    import vllm.model_executor.layers.fused_moe.experts as package
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    mxint4 = import_module(MODULE).TrtLlmMxint4ExpertsMonolithic
    weight_key = _weight_key(case.get("weight_key", "kInt4Static32"))
    answers = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda found: found.name):
        name = f"{package.__name__}.{info.name}"
        loaded = outcome_of(importlib.import_module, name)
        if "raised" in loaded:
            answers[name] = loaded
            continue
        module = loaded["returned"]
        for class_name, cls in sorted(vars(module).items()):
            if not (inspect.isclass(cls) and issubclass(cls, mk.FusedMoEExperts) and cls.__module__ == name
                    and cls is not mxint4):
                continue
            on_device = type(class_name, (cls,), {"_supports_current_device": staticmethod(lambda: True)})
            for activation in MoEActivation:
                config = _moe_config({**case, "activation": activation.name})

                def supported(on_device=on_device, config=config):
                    ok, reason = on_device.is_supported_config(on_device, config, weight_key, None,
                                                               on_device.activation_format())
                    return {"supported": bool(ok), "reason": None if reason is None else str(reason)[:300]}

                answers[f"{name}.{class_name}:{activation.name}"] = outcome_of(supported)
    return answers


def _holders_of(helper) -> list[tuple[object, str]]:
    """Where the tree can reach ``helper``: (module, name) for every loaded ``vllm`` module that holds it, its own
    module and any that imported it at module level or under an alias."""
    import sys

    return [(mod, attribute) for name, mod in list(sys.modules.items())
            if mod is not None and (name == "vllm" or name.startswith("vllm."))
            for attribute, value in list(getattr(mod, "__dict__", {}).items()) if value is helper]


@contextlib.contextmanager
def _imported_on_the_platform_played():
    """A function that imports the fix's modules anew (the experts', then the oracle's, which takes the experts
    class from it), called once a case's platform is in place; the loaded ones are put back when it ends. vLLM
    fixes its platform before it imports the model's modules, once per process, and caches what depends on it
    (the availability helper is ``functools.cache``d): a fix that reads the device when its module is imported,
    or once, is right wherever one that reads it at each call is, and is graded so."""
    kept = {name: import_module(name) for name in (MODULE, ORACLE)}

    def import_anew():
        for name in kept:
            sys.modules.pop(name, None)
        for name in kept:
            import_module(name)

    try:
        yield import_anew
    finally:
        put_back(kept)


def _process_state(case: dict) -> tuple:
    """What a vLLM process fixes once: its platform, FlashInfer's presence and the batch-invariance setting."""
    return (case.get("platform", "cuda"), tuple(case.get("capability") or ()), bool(case.get("flashinfer", True)),
            case.get("batch_invariant") == "on")


def observe(cases: list[dict]) -> list[dict]:
    """For each case, what the tree did on its faked platform: ``{"returned": ...}`` or ``{"raised", "message"}``
    (``predicate``: the activation predicate's answer; ``config``: ``is_supported_config``'s verdict and reason;
    ``oracle``: the WNA16 backend and experts class ``select_wna16_moe_backend`` picks; ``other-experts``: every
    other experts class's support check, ``_other_experts_answers``)."""
    import vllm.envs as envs
    import vllm.platforms as vp

    availability = import_module(AVAILABILITY)
    modules = [import_module(MODULE), import_module(ORACLE)]
    holders = _holders_of(availability.is_flashinfer_mxint4_moe_available)
    results = []
    with Patches() as patches, _imported_on_the_platform_played() as import_anew:
        replaced = [vp.current_platform]
        played = None
        for case in cases:
            capability = tuple(case["capability"]) if case.get("capability") else None
            fake = _make_platform(case.get("platform", "cuda"), capability)
            install_platform(patches, replaced, fake)
            for mod in modules:
                patches.set(mod, "current_platform", fake)
            installed = bool(case.get("flashinfer", True))
            for holder, attribute in holders:
                patches.set(holder, attribute, lambda installed=installed, fake=fake: _available(installed, fake))
            patches.set(envs, "VLLM_BATCH_INVARIANT", case.get("batch_invariant") == "on")
            if _process_state(case) != played:
                # another process's state: the fix's modules as that process would have imported them
                import_anew()
                played = _process_state(case)
            results.append(_observe(case) if case["site"] != "other-experts"
                           else outcome_of(_other_experts_answers, case))
    return results
