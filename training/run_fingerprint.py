"""The fingerprint of a pretraining run: everything that decides its trajectory (the model section, the pretrain
fields that are not resume-neutral, the tokenizer and the train shards). Every checkpoint and final/ records it in
config.json's `training.fingerprint`; a run continues one only under an equal fingerprint.

    fingerprint = run_fingerprint(model_cfg, cfg, tokenizer_sha256, batches)
    check_compatible(checkpoint_dir, fingerprint, "checkpoint", cfg.allow_shard_change)   # ContractError naming the fields
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from bertfactory.errors import ContractError
from bertfactory.io import content_hash

from .checkpoint import CONFIG_FILE, fingerprint_diff, read_checkpoint_config
from .config import ModelConfig
from .pretrain_config import PretrainConfig

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes

# the value every config field takes when a recipe leaves it out: a field a checkpoint predates is equal to it
FINGERPRINT_DEFAULTS = {"model": ModelConfig().model_dump(mode="json"),
                        "pretrain": PretrainConfig().trajectory_fields()}

_SHARDS_FIELD = "data.train_shards_sha256"


def run_fingerprint(model: ModelConfig, cfg: PretrainConfig, tokenizer_sha256: str, batches) -> dict:
    """Everything that decides the training trajectory; a checkpoint resumes only under an equal fingerprint."""
    manifest = batches.shards.manifest
    return json.loads(json.dumps({
        "model": model.model_dump(mode="json"),
        "pretrain": cfg.trajectory_fields(),
        "data": {"tokenizer_sha256": tokenizer_sha256,
                 "train_shards_sha256": content_hash([s.sha256 for s in manifest.splits["train"].shards])},
    }))


def saved_fingerprint(directory: Path) -> dict:
    saved = read_checkpoint_config(directory).get("training", {}).get("fingerprint")
    if saved is None:
        raise ContractError(f"{directory / CONFIG_FILE} has no 'training.fingerprint'; it was not written by pretraining")
    return saved


def extends(saved: dict, current: dict) -> bool:
    """True when `current` differs from `saved` only by a larger pretrain.max_steps (training/extend.py)."""
    old = saved.get("pretrain", {}).get("max_steps", FINGERPRINT_DEFAULTS["pretrain"]["max_steps"])
    new = current.get("pretrain", {}).get("max_steps")
    if new is None or new <= old:
        return False
    longer = {**saved, "pretrain": {**saved.get("pretrain", {}), "max_steps": new}}
    return not fingerprint_diff(longer, current, defaults=FINGERPRINT_DEFAULTS)


def check_compatible(directory: Path, current: dict, what: str, allow_shard_change: bool = False,
                     allow_longer: bool = False) -> None:
    """Refuse to continue `directory` (a checkpoint, or the final model) written under another fingerprint; only
    other train shards are let through, with a warning, when allow_shard_change, and a larger max_steps when
    allow_longer (an extension, training/extend.py: the caller checked that the schedule allows it)."""
    saved = saved_fingerprint(directory)
    if allow_longer and current.get("pretrain", {}).get("max_steps", 0) > saved.get("pretrain", {}).get("max_steps", 0):
        saved = {**saved, "pretrain": {**saved.get("pretrain", {}), "max_steps": current["pretrain"]["max_steps"]}}
    diffs = fingerprint_diff(saved, current, defaults=FINGERPRINT_DEFAULTS)
    shard_diffs = [d for d in diffs if d.startswith(_SHARDS_FIELD + " ")]
    diffs = [d for d in diffs if d not in shard_diffs]
    if shard_diffs and not diffs:
        if not allow_shard_change:
            raise ContractError(
                f"the train shards changed since {what} {directory} was written (the sha256 over the manifest's shard "
                f"hashes differs: {shard_diffs[0][len(_SHARDS_FIELD) + 1:]}); refusing to resume on other data. "
                "Continue on the new shards anyway with pretrain.allow_shard_change: true (--set "
                "pretrain.allow_shard_change=true), or restore the old shards, or use another --run-dir"
            )
        logger.warning("pretrain: the train shards changed since %s; continuing on the new shards because "
                       "pretrain.allow_shard_change is set (the data order is no longer the checkpoint's)", directory)
    if diffs:
        raise ContractError(
            f"{what} {directory} was written under a different config; refusing to continue it. Differing: "
            + "; ".join(diffs)
            + ". Use another --run-dir, or pass --force (bertfactory run/pretrain) to move "
            f"{directory.parents[1] if what == 'checkpoint' else directory.parent} aside and start over."
        )
