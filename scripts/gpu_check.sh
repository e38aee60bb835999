#!/usr/bin/env bash
# The GPU checks of a session lent a CUDA machine, as one command within a fixed time: issue 31's step figures
# (benchmarks/gpu_step.py --all) first, then `make test-gpu`'s tests, each log written as it runs; the measured rows
# also as markdown tables (gpu_all.md) for benchmarks/RESULTS.md.
#
#   OUT=/some/dir bash scripts/gpu_check.sh [SECONDS]      # default 570: the whole script's budget
#
# Written for a machine that runs the project under another Python environment than .venv (a CUDA image with
# torch and transformers but not the project's other dependencies): when .whl/ holds cp3XX wheels of the missing
# ones, they are installed into /tmp/site and put on PYTHONPATH (and their scripts, e.g. `prefect`, on PATH). The
# benchmark gets at most 62 % of the budget; the tests get what is left, minus a margin for the logs to be written.
# One measurement may take 180 s (the slowest so far, ModernBERT compiled, took ~90 s with its compilation), so that a
# hung worker cannot eat the whole benchmark's share; the compiled rows are first compiled four at a time
# (gpu_step.py --prewarm-jobs, its default), and each of ours is also profiled (--profile-steps 3).
set -uo pipefail
budget=${1:-570}
out=${OUT:?set OUT to the folder the logs go to}
cd "$(dirname "$0")/.." || exit 2
python=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: installing .whl/ failed" >&2; exit 2; }
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
{ date -u; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
  "$python" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"transformers", transformers.__version__)'; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

bench_budget=$((budget * 62 / 100))
timeout "$bench_budget" "$python" benchmarks/gpu_step.py --all --profile-steps 3 --worker-timeout 180 --json "$out/gpu_all.jsonl" 2>&1 | tee "$out/gpu_all.log"
echo "gpu_check: gpu_step --all exit ${PIPESTATUS[0]} after ${SECONDS} s" | tee -a "$out/gpu_all.log"
# the rows as RESULTS.md's tables (whatever was measured before the budget ran out)
"$python" benchmarks/gpu_step.py --markdown "$out/gpu_all.jsonl" >"$out/gpu_all.md" 2>&1

left=$((budget - SECONDS - 15))
if ((left < 60)); then
  echo "gpu_check: ${left} s left, too little for the tests" | tee "$out/test_gpu.log"
  exit 1
fi
BERTFACTORY_REQUIRE_GPU=1 timeout "$left" "$python" -m pytest -q -rfEs -p no:cacheprovider -n "${GPU_TEST_WORKERS:-3}" tests/gpu 2>&1 \
  | tee "$out/test_gpu.log"
echo "gpu_check: tests/gpu exit ${PIPESTATUS[0]} after ${SECONDS} s" | tee -a "$out/test_gpu.log"
