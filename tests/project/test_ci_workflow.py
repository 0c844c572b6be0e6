"""docs/github-workflow-example.yml: a workflow that installs what the Makefile installs (CPU torch pinned first,
then the grader, then the tasks' requirements) and keeps the judge's secret out of the Actions cache."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def steps() -> dict[str, dict]:
    workflow = yaml.safe_load((REPO / "docs" / "github-workflow-example.yml").read_text())
    return {step.get("name", step.get("uses", "")): step for step in workflow["jobs"]["grade"]["steps"]}


def test_installs_cpu_torch_at_the_makefiles_pins_before_the_grader():
    pins = re.search(r"^TORCH_PINS := (.+)$", (REPO / "Makefile").read_text(), re.M).group(1).split()
    install = next(s["run"] for name, s in steps().items() if name.startswith("Install the grader"))
    first_torch = install.index(pins[0])
    assert all(pin in install for pin in pins) and "download.pytorch.org/whl/cpu" in install
    assert first_torch < install.index("pip install -q -e .") < install.index("task-requirements")


def test_caches_only_the_sdists_and_uploads_what_the_grade_step_wrote():
    named = steps()
    cache = next(s for s in named.values() if s.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"].endswith("/sdists")
    grade = named["Grade"]["run"]
    assert "--fail-under" in grade and "--junit" in grade and "--out" in grade
    upload = next(s for s in named.values() if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
