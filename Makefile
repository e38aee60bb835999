# The two commands of the README. Both set everything up on a fresh machine (venv, pinned deps, real samples).
VENV ?= .venv
BF := $(VENV)/bin/bertfactory
RUN_DIR ?= runs/local

.PHONY: demo test setup samples clean-runs

setup:
	bash scripts/bootstrap.sh

samples: setup
	$(BF) samples fetch

## demo: the whole pipeline on the embedded default (configs/local.yaml) with local Prefect and Beam
demo: samples
	$(BF) run configs/local.yaml --run-dir $(RUN_DIR)

## test: the test suite (uses the real samples)
test: samples
	$(VENV)/bin/python -m pytest -q tests

clean-runs:
	rm -rf runs
