#!/usr/bin/env bash
# Create a Cloud TPU VM, install bertfactory's torch-xla environment on every host of the slice and start a Prefect
# process worker on it (infra/README.md, "TPU VM"). Run from the repository root, where gcloud is authenticated.
#
#   GCP_PROJECT=my-project TPU_ZONE=us-west4-a infra/tpu/setup-tpu-vm.sh all
#   infra/tpu/setup-tpu-vm.sh --dry-run all      # print the gcloud commands instead of running them
#
# Steps (each can be run alone): create | install | worker | all (= the three) | delete
# Settings (environment):
#   GCP_PROJECT (required), TPU_ZONE (required), TPU_NAME (bertfactory-tpu), TPU_TYPE (v5litepod-8),
#   TPU_RUNTIME (v2-alpha-tpuv5-lite: the TPU VM image matching TPU_TYPE), TPU_SPOT (0; 1 = spot capacity),
#   PREFECT_API_URL (required for `worker`), PREFECT_WORK_POOL (bertfactory-tpu-vm: a process pool)
# The project is copied as `git archive HEAD` (committed files only) and installed by remote-install.sh (torch 2.9.0
# + torch-xla 2.9.0 with libtpu, the pins of constraints.txt, PJRT_DEVICE=TPU).
set -euo pipefail

DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY_RUN=1
  shift
fi
STEP=${1:-}
TPU_NAME=${TPU_NAME:-bertfactory-tpu}
TPU_TYPE=${TPU_TYPE:-v5litepod-8}
TPU_RUNTIME=${TPU_RUNTIME:-v2-alpha-tpuv5-lite}
TPU_SPOT=${TPU_SPOT:-0}
PREFECT_WORK_POOL=${PREFECT_WORK_POOL:-bertfactory-tpu-vm}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
}

# Print the command (shell-quoted) in dry-run mode, run it otherwise.
run() {
  if [ "$DRY_RUN" = 1 ]; then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

require() {
  local name
  for name in "$@"; do
    if [ -z "${!name:-}" ]; then
      echo "setup-tpu-vm.sh: set $name (see --help)" >&2
      exit 2
    fi
  done
}

tpu() {
  run gcloud compute tpus tpu-vm "$1" "$TPU_NAME" --project="$GCP_PROJECT" --zone="$TPU_ZONE" "${@:2}"
}

create() {
  require GCP_PROJECT TPU_ZONE
  local spot=()
  [ "$TPU_SPOT" = 1 ] && spot=(--spot)
  tpu create --accelerator-type="$TPU_TYPE" --version="$TPU_RUNTIME" "${spot[@]}"
}

install() {
  require GCP_PROJECT TPU_ZONE
  local archive=${TMPDIR:-/tmp}/bertfactory-$TPU_NAME.tar.gz
  run git -C "$REPO" archive --format=tar.gz --prefix=bertfactory/ -o "$archive" HEAD
  # every host of a multi-host slice trains, so every host gets the environment
  run gcloud compute tpus tpu-vm scp "$archive" "$HERE/remote-install.sh" "$TPU_NAME:~/" \
    --project="$GCP_PROJECT" --zone="$TPU_ZONE" --worker=all
  tpu ssh --worker=all --command="bash ~/remote-install.sh install ~/$(basename "$archive")"
}

worker() {
  require GCP_PROJECT TPU_ZONE PREFECT_API_URL
  # one worker, on host 0; flows it runs reach the other hosts through torch-xla's multi-host runtime
  tpu ssh --worker=0 --command="bash ~/remote-install.sh worker $(printf '%q' "$PREFECT_WORK_POOL") $(printf '%q' "$PREFECT_API_URL")"
}

delete() {
  require GCP_PROJECT TPU_ZONE
  tpu delete --quiet
}

case "$STEP" in
  create) create ;;
  install) install ;;
  worker) worker ;;
  all) create; install; worker ;;
  delete) delete ;;
  *) usage ;;
esac
