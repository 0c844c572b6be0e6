# Two entry points (see README): `make grade` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup browser grade test


# A task's base.toml declares what its hidden tests need ([environment] requires): a new or changed one reinstalls.
TASK_RECIPES := $(wildcard rubrics/*/base.toml)
TORCH_PINS := "torch==2.13.0" "triton==3.7.1"

$(STAMP): pyproject.toml $(TASK_RECIPES)
	$(PYTHON) -m venv $(VENV)
	# torch and triton first, pinned, so no resolver ever pulls a CUDA build of torch.
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e ".[test,ray]"
	# The union of every task's declared requirements, torch and triton held at their pins.
	$(PY) grade.py task-requirements > $(VENV)/task-requirements.txt
	$(PY) -m pip install -q -r $(VENV)/task-requirements.txt $(TORCH_PINS)
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

test: setup browser
	$(PY) -m pytest tests -q -m "not gpu"
