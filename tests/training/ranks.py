"""Launching a pretraining run as torchrun does, for the data-parallel tests: one Python process per rank with
RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set, each calling training.pretrain.pretrain on the same
run directory (gloo on the CPU). Returns every rank's summary. `rank_cfgs`: another config for some ranks (a node
started with other settings); `wait_all`: a failed rank does not end the launch (to see what the others do then)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
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


# what rank 0's TCPStore says when another process took the port between free_port() and its bind
_PORT_TAKEN = ("Address already in use", "EADDRINUSE", "failed to listen", "Failed to bind")


def launch_ranks(model: ModelConfig, cfg: PretrainConfig, run: Path, world: int = 2,
                 stop_after: int | None = None, timeout: float = 600, attempts: int = 3,
                 rank_cfgs: dict[int, PretrainConfig] | None = None, wait_all: bool = False) -> list[dict]:
    """Every rank's summary. free_port() releases the port it found before rank 0 binds it, so another process
    can take it in between: a launch whose ranks fail on that bind (nothing trained yet) is retried on a new
    port, up to `attempts` launches; any other failure fails at once."""
    for attempt in range(1, attempts + 1):
        try:
            return _launch_once(model, cfg, run, world, stop_after, timeout, rank_cfgs or {}, wait_all)
        except _PortTaken:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


class _PortTaken(AssertionError):
    pass


def _launch_once(model: ModelConfig, cfg: PretrainConfig, run: Path, world: int, stop_after: int | None,
                 timeout: float, rank_cfgs: dict[int, PretrainConfig], wait_all: bool = False) -> list[dict]:
    port = free_port()
    procs, logs = [], []
    with tempfile.TemporaryDirectory(prefix="ranks-") as log_dir:
        for rank in range(world):
            env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONPATH": str(REPO)}
            logs.append(open(Path(log_dir) / f"rank{rank}.log", "w+"))  # a file: no pipe fills while we wait
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _WORKER, model.model_dump_json(),
                 rank_cfgs.get(rank, cfg).model_dump_json(), str(run),
                 str(stop_after) if stop_after is not None else "none"],
                cwd=REPO, env=env, stdout=logs[-1], stderr=subprocess.STDOUT, text=True))
        killed: set[int] = set()
        try:
            deadline = time.monotonic() + timeout
            # a rank that fails ends the launch: the others would wait for it (a rendezvous, a collective)
            while any(proc.poll() is None for proc in procs):
                one_failed = not wait_all and any(proc.returncode not in (None, 0) for proc in procs)
                if one_failed or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            for rank, proc in enumerate(procs):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                    killed.add(rank)
            outputs = []
            for log in logs:
                log.seek(0)
                outputs.append(log.read())
                log.close()
    failed = [(rank, out) for rank, (proc, out) in enumerate(zip(procs, outputs))
              if proc.returncode != 0 and rank not in killed]
    if failed:
        rank, out = failed[0]
        if any(sign in out for sign in _PORT_TAKEN) and "SUMMARY" not in out:
            raise _PortTaken(f"port {port} taken before rank 0 bound it:\n{out[-2000:]}")
        raise AssertionError(f"rank {rank} failed:\n{out[-4000:]}")
    if killed:
        raise AssertionError(f"ranks {sorted(killed)} still running after {timeout:g} s:\n{outputs[0][-4000:]}")
    return [json.loads(out.split("SUMMARY ", 1)[1].splitlines()[0]) for out in outputs]
