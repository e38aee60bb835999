#!/usr/bin/env bash
# Create .venv-xla: the second environment for the XLA backend (training/xla.py) and its tests
# (tests/training/xla/, `make test-xla`). torch-xla pins its own torch (2.9.0, the CUDA build from PyPI: ~4 GB,
# ~2 minutes), so it cannot share .venv (torch 2.13.0). Only third-party packages go in (the packages the training
# path and its tests import, pinned by constraints.txt, installed after torch so no resolver touches it); the
# project itself comes from PYTHONPATH=. (make test-xla), so the environment does not depend on the checkout and is
# kept in the user's cache, shared by every clone (CI's fresh clones included): .venv-xla is a link to it.
# Idempotent: does nothing when the stamp of constraints.txt + this script is there.
# Usage: bash scripts/xla_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${BERTFACTORY_XLA_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/bertfactory/venv-xla}
stamp="$VENV/.bertfactory-xla-installed-$(cat constraints.txt scripts/xla_env.sh | sha256sum | cut -c1-16)"
if [ "$VENV" != "$PWD/.venv-xla" ] && { [ -L .venv-xla ] || [ ! -e .venv-xla ]; }; then
  ln -sfn "$VENV" .venv-xla
fi
if [ -f "$stamp" ]; then
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
echo "== setting up $VENV (first time: ~4 GB, a few minutes)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" "torch==2.9.0" "torch-xla==2.9.0"
# what training/, preprocessing/shards.py, bertfactory/ and the tests import (not Beam, Prefect or evaluation;
# tensorboard: training/tracking.py writes event files by default)
"${PIP[@]}" -c constraints.txt numpy pyarrow pydantic pyyaml tokenizers safetensors tqdm matplotlib tensorboard pytest
"$VENV/bin/python" -c "import torch, torch_xla; assert torch.__version__.startswith('2.9.0'), torch.__version__"
rm -f "$VENV"/.bertfactory-xla-installed-*
touch "$stamp"
echo "== $VENV ready"
