#!/usr/bin/env bash
# The GPU path's CPU-side tests under another torch than .venv's pinned one: the torch of the image a lent GPU
# machine runs (2.11.0+cu130 on the lent H200s and H100s so far), before any device time is spent on it.
#
#   bash scripts/torch_compat.sh 2.11.0                  # the default test list below
#   bash scripts/torch_compat.sh 2.11.0 tests/gpu -k script   # or pytest's own arguments
#
# scripts/gpu_check.sh runs this repository with the lent image's torch, not with the pinned 2.13.0 of .venv (whose
# CUDA wheel does not fit the device tool's transfer), so an API of torch that the compiled step, the varlen path,
# the benchmark's prewarm (inductor's FX-graph and AOTAutograd caches) or a CUDA test uses, and that the image's torch
# lacks or spells otherwise, would fail there, in the one call a session gets. Here that torch (PyPI's build: its CUDA
# libraries install as wheels, no GPU needed to import it or to run inductor's C++ kernels) goes into a throwaway
# environment, with .venv's other packages behind it on sys.path, and runs:
#   - tests/gpu: benchmarks/gpu_step.py's CPU tests (prewarm and cache hits, markdown, gpu_check.sh's dry run) and
#     the collection of every CUDA test (those skip without a GPU);
#   - the compiled step, compile modes, the varlen path, the fused loss and the compiler check (tests/training).
# Needs .venv (make setup); ~5 GB installed the first time (the environment is kept in $TORCH_COMPAT_ROOT, default
# ${XDG_CACHE_HOME:-~/.cache}/bertfactory/torch-VERSION), then ~5 minutes of tests on 2 cores (2.5 with inductor's
# cache warm).
set -euo pipefail
version=${1:?usage: bash scripts/torch_compat.sh TORCH_VERSION [PYTEST ARGS...]}
shift
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "torch_compat: .venv is missing: run make setup first" >&2; exit 2; }
root=${TORCH_COMPAT_ROOT:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/bertfactory}
venv="$root/torch-$version"
if [ ! -f "$venv/.installed" ]; then
  echo "== torch $version into $venv (first time: its CUDA libraries as wheels, ~5 GB installed)"
  mkdir -p "$root"
  rm -rf "$venv"
  .venv/bin/python -m venv "$venv"
  # its own resolver, in its own environment: .venv's torch stays as it is
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$version"
  touch "$venv/.installed"
fi
# .venv's packages (transformers, prefect, pyarrow, pytest, ...) after the environment's own, so torch is $version's
own_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$own_site/zz_bertfactory_venv.pth"
"$venv/bin/python" -c "import torch; v = torch.__version__; print('torch', v); assert v.split('+')[0] == '$version', v"
if [ "$#" -eq 0 ]; then
  set -- tests/gpu tests/training/test_compile.py tests/training/test_compile_mode.py tests/training/test_varlen.py \
    tests/training/test_fused_loss.py tests/training/test_compiler_check.py
fi
# the project from the checkout (as gpu_check.sh runs it); shellcheck and the other console scripts from .venv
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=$PATH:$PWD/.venv/bin \
  exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs "$@"
