# The two commands of the README. Both set everything up on a fresh machine (venv, pinned deps, real samples).
VENV ?= .venv
BF := $(VENV)/bin/bertfactory
RUN_DIR ?= runs/demo

.PHONY: demo test test-gpu test-xla setup setup-xla samples clean-runs

setup:
	bash scripts/bootstrap.sh

samples: setup
	$(BF) samples fetch

## demo: the whole pipeline on the demo recipe (configs/demo.yaml: local.yaml's corpus and evaluation, the ablation's winning pretraining recipe) with local Prefect and Beam
demo: samples
	$(BF) run configs/demo.yaml --run-dir $(RUN_DIR)

## test: the test suite (uses the real samples) on 2 xdist workers, a test file (or a group of files sharing a
## server, tests/conftest.py) whole to one worker
test: samples
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadfile tests

## test-gpu: the CUDA-only tests (tests/gpu/: bf16 autocast, the varlen_attn kernel, DDP over nccl, FSDP mixed
## precision, the compiled GPU step (pretrain.compile vs eager, no recompiles, no host read inside a step, fused
## AdamW / foreach LAMB), the pretrain-gpu deployment's torchrun command) on the GPUs torch sees; a machine without CUDA fails
## instead of skipping (BERTFACTORY_REQUIRE_GPU=1). Needs the CUDA build of torch in .venv (docs/parallelism.md)
test-gpu: setup
	BERTFACTORY_REQUIRE_GPU=1 $(VENV)/bin/python -m pytest -q tests/gpu

setup-xla:
	bash scripts/xla_env.sh

## test-xla: the XLA backend's tests (tests/training/xla/) in their own environment (.venv-xla: torch 2.9.0 +
## torch-xla 2.9.0) on XLA's CPU backend; a missing torch-xla fails instead of skipping
test-xla: setup-xla
	PYTHONPATH=. PJRT_DEVICE=CPU BERTFACTORY_REQUIRE_XLA=1 .venv-xla/bin/python -m pytest -q tests/training/xla

clean-runs:
	rm -rf runs
