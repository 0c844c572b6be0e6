"""The one options record of a grading run (``GradingOptions``): it goes to JSON and back unchanged, a field it
does not know is refused, and every field reaches a Ray actor (``memory_bytes`` too) without starting Ray. The
machine's defaults behind it (``grader.core.environment``): a subject's memory limit and the GPU switch."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from grader.drive import ray_backend
from grader.core import environment
from grader.core.environment import memory_per_subject
from grader.core.records import Candidate, GradingOptions, RecordError
from grader.drive.many_candidates import grade_many
from grader.sandbox import contain

# Every field away from its default, so that a field lost on the way cannot still compare equal.
CHANGED = GradingOptions(gpu=True, timeout=12.5, jobs=3, cold=True, contained=False, keep_trees=True,
                         trace_lines=True, use_evidence_cache=False, empty_diff_grades_base=True, controls=True,
                         memory_bytes=3 << 30, also_pass=("HF_HOME",))


def test_every_field_is_changed_in_the_sample():
    defaults = GradingOptions()
    assert all(getattr(CHANGED, f.name) != getattr(defaults, f.name) for f in dataclasses.fields(GradingOptions))


@pytest.mark.parametrize("options", [GradingOptions(), CHANGED], ids=["defaults", "changed"])
def test_options_round_trip_through_json(options):
    assert GradingOptions.from_json(json.loads(json.dumps(options.to_json()))) == options


def test_an_unknown_or_mistyped_option_is_refused():
    with pytest.raises(RecordError, match="unknown field 'memory'"):
        GradingOptions.from_json({"memory": 1})
    with pytest.raises(RecordError, match="jobs"):
        GradingOptions.from_json({"jobs": "2"})


@pytest.mark.parametrize("gpu_assigned", [False, True])
def test_a_ray_actor_grades_with_every_option_of_the_driver(gpu_assigned):
    """What the backend sends each actor (pickled by Ray) gives back the driver's options; an actor holding a GPU
    passes CUDA_VISIBLE_DEVICES on as well."""
    sent = pickle.loads(pickle.dumps(ray_backend.actor_arguments(CHANGED, gpu_assigned)))
    received = ray_backend.node_options(*sent)
    assert received.memory_bytes == 3 << 30
    expected = dataclasses.replace(CHANGED, also_pass=("HF_HOME", "CUDA_VISIBLE_DEVICES")) if gpu_assigned \
        else CHANGED
    assert received == expected


class Capture:
    """A backend that grades nothing and keeps the options it was handed."""

    def __init__(self) -> None:
        self.options: GradingOptions | None = None

    def grade(self, pending, options, observer, deliver) -> None:
        self.options = options


def test_every_backend_is_handed_a_memory_limit():
    """``memory_bytes`` left out is the machine's share at ``jobs``, filled in before any backend (local or Ray)
    sees the options; one given is kept."""
    candidates = [Candidate("one", "one.diff", "+x\n", None)]
    for given, expected in ((None, memory_per_subject(2)), (5 << 30, 5 << 30)):
        backend = Capture()
        grade_many(candidates, GradingOptions(jobs=2, memory_bytes=given), backend=backend)
        assert backend.options == GradingOptions(jobs=2, memory_bytes=expected)


def test_a_subject_given_no_memory_limit_gets_the_machines_default(tmp_path):
    box = contain.prepare(tmp_path / "home", drop_uid=False, private_tmp=False)
    try:
        assert box.spec["memory_bytes"] == environment.default_memory_bytes() == \
            environment.memory_per_subject(environment.default_jobs())
    finally:
        box.cleanup()


def test_gpu_off_never_probes_cuda(monkeypatch):
    def probe() -> bool:
        raise AssertionError("--gpu off probed CUDA")

    monkeypatch.setattr(environment, "cuda_available", probe)
    assert environment.detect_gpu("off") == (False, "GPU evidence switched off (--gpu off)")
    monkeypatch.setattr(environment, "cuda_available", lambda: False)
    with pytest.raises(environment.GraderUsageError, match="--gpu on"):
        environment.detect_gpu("on")
    assert environment.detect_gpu("auto")[0] is False
