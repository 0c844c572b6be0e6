"""Imported by every subject before it answers its first probe: the stand-ins vLLM needs to import here."""

import vllm_stand_ins

vllm_stand_ins.prepare_process()
