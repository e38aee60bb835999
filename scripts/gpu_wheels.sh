#!/usr/bin/env bash
# .whl/: the wheels scripts/gpu_check.sh installs on a lent GPU machine. Its image (2026-11-26 and 11-30) had torch
# and transformers but not Prefect, which the CUDA tests need (they run the pretrain-gpu deployment as a real flow
# run); these are the wheels those sessions carried. Run here, before the device call:
#
#   bash scripts/gpu_wheels.sh [PYTHON_VERSION]     # default 3.12, the lent image's Python so far
#   WHL_DIR=/elsewhere bash scripts/gpu_wheels.sh    # another folder than .whl/ (the tests)
#   # then: run(command="OUT=$OUT bash scripts/gpu_check.sh 560", carry=[".whl"], timeout_s=600)
#
# Prefect at constraints.txt's pin and its dependencies, at constraints.txt's pins where it has one (fastapi,
# sqlalchemy: the versions this project's flows are tested with), as binary wheels for that Python on x86-64
# Linux. .whl/ is ignored by git; the device tool carries at most 64 MiB, so the script fails above 60.
set -euo pipefail
python_version=${1:-3.12}
cd "$(dirname "$0")/.."
pip=(.venv/bin/python -m pip)
[ -x .venv/bin/python ] || pip=(python3 -m pip)
prefect=$(sed -n 's/^prefect==//p' constraints.txt)
[ -n "$prefect" ] || { echo "gpu_wheels: no prefect== pin in constraints.txt" >&2; exit 2; }
out=${WHL_DIR:-.whl}
mkdir -p "$out"
rm -f "$out"/*.whl  # an earlier Prefect's wheels must not travel with this one's
"${pip[@]}" download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
  --python-version "$python_version" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -c constraints.txt -d "$out" "prefect==$prefect"
count=$(find "$out" -name '*.whl' | wc -l)
mib=$(du -sm "$out" | cut -f1)
echo "gpu_wheels: $count wheels for cp${python_version/./}, ${mib} MiB in $out (prefect $prefect)"
if ((mib > 60)); then
  echo "gpu_wheels: ${mib} MiB is over the 60 MiB this script allows (the device tool carries at most 64)" >&2
  exit 1
fi
