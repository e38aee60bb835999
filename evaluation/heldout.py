"""Held-out score of a checkpoint's own pretraining objective, for every member of the family: the objective the
checkpoint was trained with (its config.json: training.fingerprint.pretrain.objective) run in eval mode over
batches of the held-out shards, exactly as the trainer runs it, against the best no-context predictor.

    from evaluation.heldout import evaluate_objective
    scores = evaluate_objective(model, read_checkpoint_config(checkpoint), run_dir / "shards", tokenizer_sha256,
                                ObjectiveEvalConfig(), device)

What is reported, per loss the objective returns (`mlm`, `plm`, `clm`, `sbo`, `disc`, `nsp`/`sop`, ...):
`<name>_loss` (mean over the evaluated predictions, each batch weighted by its `<name>_count`) and `<name>_acc`.
Token-prediction losses (MLM, SBO, PLM, CLM) also get a perplexity and the no-context baseline: the cross-entropy
of the held-out tokens under the train split's unigram distribution (add-one smoothed, special tokens excluded;
evaluation/intrinsic.py). A masked position, XLNet's predicted tail of an order and CLM's next token are all
draws of held-out tokens, so a model that learnt nothing from context sits at that baseline. ELECTRA's
replaced-token detection is compared with always answering "original" (accuracy 1 - replaced rate, loss the
binary entropy of that rate); NSP/SOP with always answering the majority label.

The batches are the trainer's (training/data.py PretrainBatches over the split, its own permutation of the
split's rows, seed `seed`), so an objective's own random draws (ELECTRA's replacements, XLNet's orders, dynamic
masks) are seeded per sample as in training and the score is deterministic. Their length is the shards' (the
recipe's preprocess.instances.max_seq_len); with `max_seq_len` set, the split's rows are joined into rows of up
to that many tokens instead (evaluation/long_rows.py: a long-context score, e.g. ModernBERT at 1,024 tokens).

A split without instances (a small corpus can hold out no document) is refused naming it and
`preprocess.heldout_fraction` (evaluation/intrinsic.py `empty_split`); the evaluation stage checks first and skips
the score with a warning instead (evaluation/run.py).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from bertfactory.errors import ConfigError, ContractError
from training.data import PretrainBatches
from training.objectives import get_objective_spec
from training.streams import evaluation_batches

from .config import EvaluateConfig, ObjectiveEvalConfig
from .intrinsic import _unigram_log_probs, empty_split
from .long_rows import FIELD as MAX_SEQ_LEN_FIELD
from .long_rows import LongRowBatches

logger = logging.getLogger(__name__)

# losses over predicted tokens of the text: their no-context baseline is the unigram cross-entropy
TOKEN_LOSSES = ("mlm", "plm", "clm", "sbo", "tlm")


def checkpoint_objective(config_doc: dict) -> str | None:
    """The objective a pretraining checkpoint was trained with (None for a model imported from elsewhere)."""
    return _fingerprint(config_doc).get("pretrain", {}).get("objective")


def _fingerprint(config_doc: dict) -> dict:
    return ((config_doc.get("training") or {}).get("fingerprint")) or {}


# what the held-out split is scored with: a joint schedule is scored on its part that the run's own shards feed
SCORED_AS = {"xlm_mlm_tlm": "xlm_mlm"}


@torch.no_grad()
def evaluate_objective(model: torch.nn.Module, config_doc: dict, shard_dir: Path, tokenizer_sha256: str,
                       cfg: ObjectiveEvalConfig, device: torch.device) -> dict:
    """Score the checkpoint (`config_doc`: its config.json) on `cfg.split` of `shard_dir` with its own objective."""
    from training.config import ModelConfig
    from training.pretrain_config import PretrainConfig

    trained_with = checkpoint_objective(config_doc)
    objective = SCORED_AS.get(trained_with, trained_with)
    spec = get_objective_spec(objective)
    empty = empty_split(shard_dir, cfg.split)
    if empty is not None:  # before the loader, whose refusal of an empty split speaks of pretrain.batch_size
        raise ContractError(empty)
    probe = PretrainBatches.open(shard_dir, tokenizer_sha256, 1, cfg.seed, split=cfg.split, verify=False)
    spec.check_shards(probe.shards.manifest, str(shard_dir / "manifest.json"))
    rows = probe.rows
    if cfg.max_seq_len is not None:
        batches = _long_rows(model, objective, spec, probe.shards, cfg)
    else:
        # recurrent members (txl_clm, plm with a memory) on clm shards: the documents as streams, the memory
        # carried from segment to segment as in training (training/streams.py); else the trainer's PretrainBatches
        batches = evaluation_batches(model, objective, shard_dir, tokenizer_sha256, min(cfg.batch_size, rows),
                                     cfg.seed, cfg.split)
    if spec.prepare_batches is not None:  # batches that need the recipe's settings (XLM's languages per row)
        recipe = _fingerprint(config_doc)
        batches = spec.prepare_batches(batches, ModelConfig(**recipe.get("model", {})),
                                       PretrainConfig(objective=objective, verify_shards=False), shard_dir.parent)
    steps = batches.steps_per_epoch if cfg.max_batches is None else min(cfg.max_batches, batches.steps_per_epoch)
    unigram = _unigram_log_probs(shard_dir, tokenizer_sha256, model.config.vocab_size,
                                 batches.shards.manifest.tokenizer.special_ids.values())
    special = np.array(sorted(set(batches.shards.manifest.tokenizer.special_ids.values())), dtype=np.int64)

    model.eval()
    loss_sums: dict[str, float] = {}  # name -> sum of loss x weight (the batch's count of that loss's predictions)
    weights: dict[str, float] = {}
    correct: dict[str, float] = {}
    counts: dict[str, float] = {}
    token_nll = token_count = replaced = 0.0
    label_counts = np.zeros(2, dtype=np.int64)
    rng_state = torch.get_rng_state()
    torch.manual_seed(cfg.seed)  # objectives that still draw from the global RNG (dropout is off in eval mode)
    try:
        for step in tqdm(range(steps), desc=f"objective {objective} ({cfg.split})", unit="batch", disable=None,
                         leave=False):
            batch = batches.batch(step)
            text = _original(batch)
            real = batch["attention_mask"].numpy().astype(bool) & ~np.isin(text, special)
            token_nll -= float(unigram[text[real]].sum())
            token_count += int(real.sum())
            label_counts += np.bincount(batch["nsp_labels"].numpy(), minlength=2)[:2]
            out = spec.loss(model, {k: v.to(device) for k, v in batch.items()})
            scalars = {k: float(v) for k, v in out.items() if isinstance(v, torch.Tensor) and v.dim() == 0}
            for key, value in scalars.items():
                name, _, kind = key.rpartition("_")
                if kind == "loss" and name:
                    weight = scalars.get(f"{name}_count", float(len(text)))
                    loss_sums[name] = loss_sums.get(name, 0.0) + value * weight
                    weights[name] = weights.get(name, 0.0) + weight
                elif kind == "correct":
                    correct[name] = correct.get(name, 0.0) + value
                elif kind == "count":
                    counts[name] = counts.get(name, 0.0) + value
            replaced += scalars.get("disc_replaced", 0.0)
            if out.get("nsp_logits") is not None and "nsp_correct" not in scalars:  # BERT's NSP: its accuracy too
                predicted = out["nsp_logits"].argmax(-1).cpu()
                correct["nsp"] = correct.get("nsp", 0.0) + float((predicted == batch["nsp_labels"]).sum())
                counts["nsp"] = counts.get("nsp", 0.0) + float(len(predicted))
    finally:
        torch.set_rng_state(rng_state)

    unigram_loss = token_nll / max(token_count, 1)
    scores: dict = {"objective": trained_with, "scored_as": objective, "split": cfg.split, "batches": steps,
                    "instances": steps * batches.batch_size,
                    "max_seq_len": cfg.max_seq_len or batches.shards.manifest.instance_format.get("max_seq_len"),
                    "unigram_token_loss": unigram_loss, "unigram_token_perplexity": math.exp(min(unigram_loss, 700.0))}
    for name, total in loss_sums.items():
        if weights[name] <= 0:
            continue
        loss = total / weights[name]
        scores[f"{name}_loss"] = loss
        if counts.get(name):
            scores[f"{name}_acc"] = correct.get(name, 0.0) / counts[name]
        if name in TOKEN_LOSSES:
            scores[f"{name}_perplexity"] = math.exp(min(loss, 700.0))
    if "disc" in loss_sums and counts.get("disc"):
        rate = replaced / counts["disc"]
        scores["disc_baseline_acc"] = 1.0 - rate
        scores["disc_baseline_loss"] = _binary_entropy(rate)
    for name in ("nsp", "sop"):
        if f"{name}_loss" in scores:
            scores[f"{name}_baseline_acc"] = float(label_counts.max() / max(label_counts.sum(), 1))
    scores["headline"] = headline(scores)
    logger.info("held-out %s: %s", objective, scores["headline"])
    return scores


def without_empty_splits(cfg: EvaluateConfig, shard_dir: Path, intrinsic: bool, objective: bool) -> EvaluateConfig:
    """`cfg` with each held-out score whose split has no instances turned off, as for a run directory without shards
    (flows/evaluate_cli.py): its part is absent from results.json, the report says it was not run, and the tasks
    still run. A small corpus can hold out no document at all (preprocess.heldout_fraction). One warning line per
    score turned off; `intrinsic` / `objective`: whether the checkpoint would get that score at all (BERT's MLM/NSP
    heads, a recorded pretraining objective)."""
    off = {}
    for part, scored in (("intrinsic", intrinsic), ("objective", objective)):
        part_cfg = getattr(cfg, part)
        if not (scored and part_cfg.enabled):
            continue
        empty = empty_split(shard_dir, part_cfg.split)
        if empty is not None:
            logger.warning("evaluate.%s skipped, the tasks still run: %s", part, empty)
            off[part] = part_cfg.model_copy(update={"enabled": False})
    return cfg.model_copy(update=off) if off else cfg


def _long_rows(model: torch.nn.Module, objective: str, spec, shards, cfg: ObjectiveEvalConfig) -> LongRowBatches:
    """The split's rows joined to cfg.max_seq_len tokens, refused where the model or objective cannot take them."""
    if spec.prepare_batches is not None:
        raise ConfigError(f"{MAX_SEQ_LEN_FIELD}: objective {objective} reads its batches with the recipe's settings "
                          "(XLM's languages), which joined rows do not carry; leave it null")
    longest = getattr(model.config, "max_position_embeddings", None)
    if longest is not None and cfg.max_seq_len > longest:
        raise ConfigError(f"{MAX_SEQ_LEN_FIELD}={cfg.max_seq_len} is longer than the model's inputs can be "
                          f"(model.max_position_embeddings {longest})")
    return LongRowBatches(shards, cfg.max_seq_len, cfg.batch_size, cfg.seed)


def headline(scores: dict) -> dict:
    """The member's one number against its no-context baseline: the first token-prediction loss the objective
    reports (MLM, SBO, PLM, CLM) as loss and perplexity, else replaced-token detection accuracy."""
    for name in TOKEN_LOSSES:
        if f"{name}_loss" in scores:
            return {"metric": f"{name}_loss", "value": scores[f"{name}_loss"],
                    "baseline": scores["unigram_token_loss"], "baseline_name": "unigram (no context)",
                    "perplexity": scores[f"{name}_perplexity"],
                    "baseline_perplexity": scores["unigram_token_perplexity"]}
    if "disc_acc" in scores:
        return {"metric": "disc_acc", "value": scores["disc_acc"], "baseline": scores["disc_baseline_acc"],
                "baseline_name": "always 'original'"}
    return {}


def _original(batch: dict[str, torch.Tensor]) -> np.ndarray:
    """The batch's text with the masks undone (what a no-context predictor is scored on)."""
    ids = batch["input_ids"].numpy().copy()
    positions, labels = batch["masked_positions"].numpy(), batch["masked_labels"].numpy()
    rows, slots = np.nonzero(labels >= 0)
    ids[rows, positions[rows, slots]] = labels[rows, slots]
    return ids


def _binary_entropy(p: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))
