#!/usr/bin/env bash
# Create .venv and install bertfactory with pinned dependencies. Idempotent: does nothing when .venv already
# matches pyproject.toml + constraints.txt. Usage: bash scripts/bootstrap.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${BERTFACTORY_VENV:-.venv}
stamp="$VENV/.bertfactory-installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi
echo "== setting up $VENV (first time: a few minutes)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
# torch first and alone, so no resolver can pull a different (CUDA, multi-GB) build.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]"
rm -f "$VENV"/.bertfactory-installed-*
touch "$stamp"
echo "== $VENV ready"
