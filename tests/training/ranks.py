"""Launching a pretraining run as torchrun does, for the data-parallel tests: one Python process per rank with
RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set, each calling training.pretrain.pretrain on the same
run directory (gloo on the CPU). Returns every rank's summary."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from training.config import ModelConfig
from training.pretrain_config import PretrainConfig

REPO = Path(__file__).resolve().parents[2]

_WORKER = """
import json, sys
from pathlib import Path
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain
model, cfg, run = json.loads(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
stop = int(sys.argv[4]) if sys.argv[4] != "none" else None
summary = pretrain(ModelConfig(**model), PretrainConfig(**cfg), run, stop_after=stop)
print("SUMMARY", json.dumps(summary))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(model: ModelConfig, cfg: PretrainConfig, run: Path, world: int = 2,
                 stop_after: int | None = None, timeout: float = 600) -> list[dict]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONPATH": str(REPO)}
        procs.append(subprocess.Popen(
            [sys.executable, "-c", _WORKER, model.model_dump_json(), cfg.model_dump_json(), str(run),
             str(stop_after) if stop_after is not None else "none"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, out[-4000:]
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [json.loads(out.split("SUMMARY ", 1)[1].splitlines()[0]) for out in outputs]
