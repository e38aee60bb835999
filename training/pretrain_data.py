"""The data side of a pretraining run: RUN/shards opened as this process's batches for the configured objective,
and the architecture config those batches ask for (vocabulary, padding id, heads of the objective).

    data = open_training_data(model_cfg, cfg, PretrainPaths(run_dir), tokenizer_sha256, dist)
    data.batches.batch(step), data.architecture.build(data.arch_config), data.static_width

The loader is training/data.py (training/streams.py for pretrain.stream_batches), grown by pretrain.batch_size_ramp
(training/batch_ramp.py) and by the objective's own preparation (XLM's languages and TLM pairs, training/xlm_data.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .batch_ramp import RampedBatches
from .config import ModelConfig
from .data import PretrainBatches
from .distributed import DistContext
from .models.registry import Architecture, get_architecture
from .objectives import ObjectiveSpec, get_objective_spec
from .pretrain_config import PretrainConfig
from .run_checks import check_micro_batches, check_positions, check_same_run
from .run_layout import PretrainPaths
from .streams import StreamBatches


@dataclass
class TrainingData:
    batches: Any  # PretrainBatches, or a loader wrapping one (StreamBatches, RampedBatches, XLM's)
    objective: ObjectiveSpec
    architecture: Architecture
    arch_config: Any  # the architecture's config for these shards and this objective
    sequence_length: int  # the longest sequence the model must hold (run_checks.check_positions)


def open_training_data(model_cfg: ModelConfig, cfg: PretrainConfig, paths: PretrainPaths, tokenizer_sha256: str,
                       dist: DistContext) -> TrainingData:
    # torchrun: every rank was started with the same settings, before any of them can be refused alone
    check_same_run(model_cfg, cfg, tokenizer_sha256, paths.shards / "manifest.json", dist)
    # stream_batches: clm shards as parallel document streams, for a memory carried across batches
    loader = StreamBatches if cfg.stream_batches else PretrainBatches
    batches = loader.open(paths.shards, tokenizer_sha256, cfg.batch_size, cfg.seed, verify=cfg.verify_shards,
                          rank=dist.rank, world_size=dist.world_size, length_buckets=cfg.length_buckets,
                          bucket_window=cfg.bucket_window)
    check_micro_batches(batches, cfg, dist)
    if cfg.batch_size_ramp is not None:
        batches = RampedBatches.from_config(batches, cfg.batch_size_ramp, cfg.grad_accumulation)
    manifest = batches.shards.manifest
    manifest_path = str(paths.shards / "manifest.json")
    objective = get_objective_spec(cfg.objective)
    objective.check_shards(manifest, manifest_path)
    if objective.prepare_batches is not None:  # XLM: languages per row, the TLM pairs beside MLM
        batches = objective.prepare_batches(batches, model_cfg, cfg, paths.run_dir)
    architecture = get_architecture(objective.architecture)
    arch_config = objective.configure(
        architecture.from_model_config(model_cfg, manifest.tokenizer.vocab_size, batches.pad_id))
    return TrainingData(batches, objective, architecture, arch_config,
                        check_positions(arch_config, batches, manifest_path))
