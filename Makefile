# Two entry points (see README): `make grade` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup browser grade test test-slow


# Two steps, so that a task's new requirement does not rebuild everything: the grader itself (torch and triton
# pinned first, so no resolver ever pulls a CUDA build of torch) when pyproject.toml changes, and then, when a
# task's base.toml changes, only the declared requirements this environment lacks (`grade.py task-requirements
# --install`, torch and triton held where they are).
TASK_RECIPES := $(wildcard rubrics/*/base.toml)
TORCH_PINS := "torch==2.13.0" "triton==3.7.1"
GRADER_STAMP := $(VENV)/.grader-installed

$(GRADER_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e ".[test,ray]"
	touch $(GRADER_STAMP)

$(STAMP): $(GRADER_STAMP) $(TASK_RECIPES)
	$(PY) grade.py task-requirements --install
	touch $(STAMP)

setup: $(STAMP)

grade: setup
	$(PY) grade.py bases --verify
	# The samples include designed failures, so exit 1 (some candidate failed) is what a sound run gives here.
	$(PY) grade.py candidates --out out --junit out/junit.xml || [ $$? -eq 1 ]

# Headless Chromium for the scorecard screenshot test; installed only where we may (root with apt-get).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium not installed: the browser test will be skipped"

# The normal run: every fast test, and the covering set of samples (base, reference and the fewest samples that show
# every criterion at every designed status, tests/e2e/test_samples.py) graded end to end against their designs.
# `make test-slow` grades every sample and runs the other end-to-end tests (real signals, faults, two graders at
# once, whole bundles, every sample under five secrets): hours on 2 cores.
test: setup browser
	$(PY) -m pytest tests -q -m "not gpu and not slow"
	GRADER_TEST_SAMPLES=covering $(PY) -m pytest tests/e2e/test_samples.py -q -m "not gpu"

test-slow: setup browser
	$(PY) -m pytest tests -q -m "slow and not gpu"
