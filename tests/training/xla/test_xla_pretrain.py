"""pretrain.device xla on XLA's CPU backend (PJRT_DEVICE=CPU): a tiny BERT pretrains through the same trainer and
`pretrain()` as on CPU, its loss falls, and XLA compiles its graphs in the first steps only - the compile count
(torch_xla.debug.metrics 'CompileTime') does not grow over the later steps, across batches of different real
lengths (padded to the static width) and a resume from a checkpoint. Values are read from the device only when a
metrics line is written, not once per step.

Runs in the torch-xla environment only (see conftest.py): `make test-xla`."""

import json

import pytest

from bertfactory.errors import ConfigError
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

# dropout off: XLA's and the CPU's random streams differ; without them the two devices compute the same steps
TINY = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                   hidden_dropout=0.0, attention_dropout=0.0)
XLA = PretrainConfig(device="xla", static_shapes=True, batch_size=16, max_steps=40, warmup_steps=2,
                     learning_rate=1e-2, log_every=4, save_every=10, seed=3, bf16=False)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_tiny_pretraining_on_xla_learns_and_stops_compiling(run_factory):
    import torch_xla.debug.metrics as met

    from training.xla import compile_count

    # rows of 12..32 tokens: unpadded, every batch would have another width (and another graph)
    run = run_factory("xla", max_seq_len=32, min_seq_len=12, train_rows=128, heldout_rows=8)
    compiles, transfers = [], []
    for stop in (10, 20, 30, 40):  # four slices of 10 steps, each resumed from the last one's checkpoint
        summary = pretrain(TINY, XLA, run, stop_after=stop)
        compiles.append(compile_count())
        transfers.append((met.metric_data("TransferFromDeviceTime") or [0])[0])
    assert summary["status"] == "trained" and summary["device"].startswith("xla")

    records = _metrics(run)
    assert [r["step"] for r in records] == list(range(4, 41, 4))
    assert records[-1]["loss"] < records[0]["loss"] - 0.15, [r["loss"] for r in records]  # it learns
    assert records[-1]["mlm_acc"] > records[0]["mlm_acc"]
    assert all(r["skipped_steps"] == 0 for r in records)
    # the first slice compiles the step graph (and its warmup variants); the 30 later steps compile nothing
    assert compiles[0] > 0
    assert compiles[1] == compiles[2] == compiles[3], compiles
    print("xla compile counts after steps 10/20/30/40:", compiles, "device->host transfers:", transfers)

    # the same trainer on the CPU (torch of this environment, uninterrupted) takes the same steps
    cpu_run = run_factory("cpu", max_seq_len=32, min_seq_len=12, train_rows=128, heldout_rows=8)
    pretrain(TINY, XLA.model_copy(update={"device": "cpu"}), cpu_run)
    cpu = [r["loss"] for r in _metrics(cpu_run)]
    assert cpu == pytest.approx([r["loss"] for r in records], abs=2e-3)


def test_no_host_read_inside_the_step(run_factory):
    """Between two metrics lines the steps run without reading anything back from the device."""
    import torch_xla.debug.metrics as met

    run = run_factory("quiet", max_seq_len=24, min_seq_len=12, train_rows=64, heldout_rows=8)
    cfg = XLA.model_copy(update={"max_steps": 9, "log_every": 8, "save_every": 100})
    pretrain(TINY, cfg, run, stop_after=1)  # compiles the graphs; no checkpoint, so the next call starts afresh
    before = (met.metric_data("TransferFromDeviceTime") or [0])[0]
    pretrain(TINY, cfg, run, stop_after=8)  # 8 steps, one metrics line at step 8, no checkpoint, no final model
    after = (met.metric_data("TransferFromDeviceTime") or [0])[0]
    assert after - before == 1, after - before  # the metrics line's one read of the 8 steps' scalars
    assert len(_metrics(run)) == 1


def test_xla_needs_static_shapes():
    with pytest.raises(ValueError, match="static_shapes"):
        PretrainConfig(device="xla", static_shapes=False)
    with pytest.raises(ValueError, match="grad_accumulation"):
        PretrainConfig(device="xla", static_shapes=True, grad_accumulation=2, batch_size=4)


_CACHED_RUN = """
import json, sys
from pathlib import Path
import torch_xla.debug.metrics as met
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain
model = ModelConfig.model_validate_json(sys.argv[1])
cfg = PretrainConfig.model_validate_json(sys.argv[2])
pretrain(model, cfg, Path(sys.argv[3]))
print(json.dumps({name: met.counter_value("PersistentCache" + name) or 0
                  for name in ("Hit", "Miss", "DeserializeFailure")}))
"""


def test_persistent_compilation_cache_is_written_and_read_by_a_second_process(run_factory, tmp_path):
    """pretrain.xla_cache_dir: the first process compiles and stores its graphs, a second one finds every one of
    them on disk. torch-xla 2.9 then fails to deserialize them on the CPU backend (PersistentCacheDeserializeFailure,
    the upstream bug pytorch/xla#9094, open for TPU and GPU too) and compiles again: on this version the cache is
    wired and consulted, but the compile time it would save is not realised."""
    import os
    import subprocess
    import sys

    cache = tmp_path / "xla-cache"
    cfg = XLA.model_copy(update={"max_steps": 3, "warmup_steps": 1, "xla_cache_dir": str(cache)})
    counts = []
    for name in ("first", "second"):
        run = run_factory(name, max_seq_len=16, min_seq_len=12, train_rows=32, heldout_rows=8)
        done = subprocess.run([sys.executable, "-c", _CACHED_RUN, TINY.model_dump_json(), cfg.model_dump_json(),
                               str(run)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PJRT_DEVICE": "CPU"})
        assert done.returncode == 0, done.stderr[-3000:]
        counts.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert len(list(cache.iterdir())) == counts[0]["Miss"] > 0, counts  # one file per compiled graph
    assert counts[0]["Hit"] == counts[0]["DeserializeFailure"] == 0, counts
    assert counts[1]["Miss"] == 0, counts  # every graph of the second process was found in the cache
    assert counts[1]["Hit"] + counts[1]["DeserializeFailure"] == counts[0]["Miss"], counts


def test_cache_dir_refused_after_the_first_computation():
    import torch
    import torch_xla

    from training.xla import xla_device

    torch.ones(2, device=torch_xla.device()).sum().cpu()  # this process has now computed something on XLA
    import training.xla as module

    if module._cache_dir_initialised is None:
        with pytest.raises(ConfigError, match="before the first one"):
            xla_device("/nonexistent/xla-cache")
