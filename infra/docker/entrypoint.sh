#!/usr/bin/env bash
# Entrypoint of the bertfactory images (infra/docker/Dockerfile.*). Usage:
#   worker [ARGS]  a Prefect worker on $PREFECT_WORK_POOL (type $PREFECT_WORKER_TYPE, default process); ARGS go
#                  to `prefect worker start` (e.g. --run-once, --limit 1)
#   server [ARGS]  `prefect server start` on $PREFECT_SERVER_API_HOST port ${PREFECT_SERVER_PORT:-4200}. The host
#                  defaults to 127.0.0.1 (loopback: nothing outside the container reaches it, so a plain
#                  `docker run -p 4200:4200 IMAGE server` exposes no unauthenticated API); a deployment opts in to
#                  other interfaces by setting it (the compose file sets 0.0.0.0 and publishes on 127.0.0.1 only).
#                  Exposed without PREFECT_SERVER_API_AUTH_STRING (Prefect's basic auth), it warns on stderr.
#   anything else  run as given: what Prefect's Docker/Kubernetes workers send (`prefect flow-run execute`),
#                  `bertfactory ...`, `torchrun ...`, a shell
set -euo pipefail

case "${1:-worker}" in
  worker)
    [ "$#" -gt 0 ] && shift
    : "${PREFECT_WORK_POOL:?set PREFECT_WORK_POOL to the work pool this worker polls}"
    : "${PREFECT_API_URL:?set PREFECT_API_URL to the Prefect server API, e.g. http://prefect-server:4200/api}"
    exec prefect worker start --pool "$PREFECT_WORK_POOL" --type "${PREFECT_WORKER_TYPE:-process}" "$@"
    ;;
  server)
    shift
    host="${PREFECT_SERVER_API_HOST:-127.0.0.1}"
    case "$host" in
      127.*|localhost|::1) ;;
      *)
        if [ -z "${PREFECT_SERVER_API_AUTH_STRING:-}" ]; then
          echo "entrypoint: warning: the Prefect API listens on $host without authentication: whoever reaches the" \
               "port can run flows. Publish it on 127.0.0.1 only, or set PREFECT_SERVER_API_AUTH_STRING=user:password" \
               "(clients: PREFECT_API_AUTH_STRING); see docs/orchestration.md, 'An exposed server'" >&2
        fi
        ;;
    esac
    exec prefect server start --host "$host" --port "${PREFECT_SERVER_PORT:-4200}" "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
