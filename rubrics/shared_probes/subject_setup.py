"""Imported by every subject before it answers its first probe: the stand-ins vLLM needs to import here, and the
Triton interpreter without its repeated re-patching (``interpreter_repatch``)."""

import interpreter_repatch
import vllm_stand_ins

vllm_stand_ins.prepare_process()
interpreter_repatch.install()
