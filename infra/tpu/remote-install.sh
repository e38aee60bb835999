#!/usr/bin/env bash
# Runs on a Cloud TPU VM host (copied there by setup-tpu-vm.sh). Usage:
#   bash remote-install.sh install ~/bertfactory.tar.gz   # Python 3.11 venv with torch-xla and the project
#   bash remote-install.sh worker POOL API_URL            # a systemd service: Prefect process worker on POOL
# The environment is ~/bertfactory-venv (Python 3.11 from uv: the TPU images' Ubuntu ships 3.10, older than
# constraints.txt's pins allow); the project is unpacked to ~/bertfactory. Idempotent: a rerun replaces both.
set -euo pipefail

VENV=$HOME/bertfactory-venv
SRC=$HOME/bertfactory
UV_VERSION=0.13.8
TORCH_VERSION=2.9.0
TORCH_XLA_VERSION=2.9.0

install_env() {
  local archive=$1
  rm -rf "$SRC" && mkdir -p "$SRC"
  tar -xzf "$archive" -C "$HOME"
  python3 -m pip install --user --quiet "uv==$UV_VERSION"
  local uv=$HOME/.local/bin/uv
  "$uv" venv --python 3.11 --allow-existing "$VENV"
  "$uv" pip install --python "$VENV/bin/python" "torch==$TORCH_VERSION" "torch_xla[tpu]==$TORCH_XLA_VERSION"
  "$VENV/bin/python" "$SRC/infra/docker/requirements.py" --pyproject "$SRC/pyproject.toml" --without torch \
    > "$SRC/requirements-tpu.txt"
  "$uv" pip install --python "$VENV/bin/python" -c "$SRC/constraints.txt" -r "$SRC/requirements-tpu.txt"
  # --no-deps: pyproject.toml pins the torch 2.13.0 of the main environment; torch-xla needs its own 2.9.0
  "$uv" pip install --python "$VENV/bin/python" --no-deps "$SRC"
  PJRT_DEVICE=TPU "$VENV/bin/python" -c "import torch_xla.core.xla_model as xm; print('XLA device:', xm.xla_device())"
}

install_worker() {
  local pool=$1 api_url=$2
  sudo tee /etc/systemd/system/bertfactory-worker.service > /dev/null <<UNIT
[Unit]
Description=Prefect worker for bertfactory (pool $pool)
After=network-online.target
Wants=network-online.target

[Service]
User=$USER
WorkingDirectory=$SRC
Environment=PJRT_DEVICE=TPU
Environment=PREFECT_API_URL=$api_url
Environment=PREFECT_SERVER_ANALYTICS_ENABLED=false
ExecStart=$VENV/bin/prefect worker start --pool $pool --type process
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
  sudo systemctl daemon-reload
  sudo systemctl enable --now bertfactory-worker.service
  sudo systemctl --no-pager status bertfactory-worker.service
}

case "${1:-}" in
  install) install_env "${2:?usage: remote-install.sh install ARCHIVE}" ;;
  worker) install_worker "${2:?usage: remote-install.sh worker POOL API_URL}" "${3:?usage: remote-install.sh worker POOL API_URL}" ;;
  *) echo "usage: remote-install.sh install ARCHIVE | worker POOL API_URL" >&2; exit 2 ;;
esac
