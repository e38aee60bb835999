"""pretrain.xla_spmd on XLA's CPU backend with two virtual devices (PJRT_DEVICE=CPU CPU_NUM_DEVICES=2): each batch
is sharded over the devices on its batch dimension, the loss curve equals one XLA device with the whole batch, and
the compile count stops growing.

SPMD is a process-wide mode entered before the first XLA computation, and the device count is fixed when the
runtime starts, so the two-device run is a child process; the one-device reference runs in this process (one CPU
device: CPU_NUM_DEVICES unset). Runs in the torch-xla environment only (see conftest.py): `make test-xla`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

REPO = Path(__file__).resolve().parents[3]
# dropout off: the devices' random streams are not one device's
TINY = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                   hidden_dropout=0.0, attention_dropout=0.0)
ONE_DEVICE = PretrainConfig(device="xla", static_shapes=True, batch_size=16, max_steps=24, warmup_steps=2,
                            learning_rate=1e-2, log_every=4, save_every=8, seed=3, bf16=False)
SLICES = (8, 16, 24)  # each resumed from the previous slice's checkpoint

_WORKER = """
import json, sys
from pathlib import Path
from bertfactory.errors import ConfigError
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain
from training import xla
model, cfg, run, slices = ModelConfig(**json.loads(sys.argv[1])), PretrainConfig(**json.loads(sys.argv[2])), \\
    Path(sys.argv[3]), json.loads(sys.argv[4])
compiles = []
for stop in slices:
    summary = pretrain(model, cfg, run, stop_after=stop)
    compiles.append(xla.compile_count())
# how the loader places a batch: rows split over the devices
import torch
host = {"input_ids": torch.zeros(16, 32, dtype=torch.long), "token_type_ids": torch.zeros(16, 32, dtype=torch.long),
        "attention_mask": torch.ones(16, 32, dtype=torch.long)}
device_batch, _ = next(xla.device_batches(iter([host]), xla.xla_device(spmd=True), 32, 0))
import torch_xla
sharding = torch_xla._XLAC._get_xla_sharding_spec(device_batch["input_ids"])
try:
    pretrain(model, cfg.model_copy(update={"batch_size": 15, "grad_accumulation": 1}), run)
    refused = None
except ConfigError as err:
    refused = str(err)
print("RESULT", json.dumps({"summary": summary, "compiles": compiles, "sharding": sharding, "refused": refused}))
"""


def _losses(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_two_spmd_devices_train_like_one_device_with_the_whole_batch(run_factory):
    two = run_factory("two", max_seq_len=32, min_seq_len=12, train_rows=128, heldout_rows=8)
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _WORKER, TINY.model_dump_json(),
                           ONE_DEVICE.model_copy(update={"xla_spmd": True}).model_dump_json(), str(two),
                           json.dumps(SLICES)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["summary"]["status"] == "trained" and result["summary"]["xla_spmd_devices"] == 2
    assert result["sharding"] == "{devices=[2,1]0,1}"  # rows 0-7 on device 0, 8-15 on device 1
    assert "not a multiple of 2" in result["refused"]
    compiles = result["compiles"]
    # the first slice compiles the step graphs; the resumed process compiles the step once more (its parameters
    # come from the checkpoint, not from an SPMD program); then nothing
    assert compiles[0] > 0 and compiles[1] == compiles[2], compiles
    print("spmd compile counts after steps", SLICES, compiles)

    one = run_factory("one", max_seq_len=32, min_seq_len=12, train_rows=128, heldout_rows=8)
    for stop in SLICES:
        pretrain(TINY, ONE_DEVICE, one, stop_after=stop)
    want, got = _losses(one), _losses(two)
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(4, 25, 4))
    for a, b in zip(want, got):
        assert b["tokens"] == a["tokens"] and b["lr"] == a["lr"]
        # the devices' partial sums of the loss and gradients are all-reduced: the same numbers in another order
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert b[key] == pytest.approx(a[key], rel=1e-5), (key, a, b)
    assert got[-1]["loss"] < got[0]["loss"]
    print("max relative loss difference 2 SPMD devices vs 1:",
          max(abs(b["loss"] - a["loss"]) / a["loss"] for a, b in zip(want, got)))
