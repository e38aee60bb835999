"""Intrinsic evaluation: masked-LM accuracy / loss / perplexity and next-sentence accuracy of a pretrained model on
a shard split it was not trained on (RUN/shards, split `heldout`, mask variant 0 by default).

The masked positions and the tokens placed there are the ones stored in the shards (BERT's 80/10/10
[MASK]/random/unchanged replacement), so every model evaluated on the same shards answers the same questions.
MLM accuracy = argmax prediction equals the original token, over every masked position; MLM loss = mean
cross-entropy over those positions; perplexity = exp(MLM loss). NSP accuracy is over instances, and
`nsp_label_counts` says how many were of each label ([IsNext, NotNext]; sentence-order shards: [in order, swapped]).
A held-out split of one document has IsNext pairs only (a NotNext B is drawn from another document): its NSP
accuracy then only says how often the model answers IsNext (a model that always does scores 1.0). It is still
reported, with a warning here and a note wherever it is shown (evaluation/results.py `nsp_one_label_note`).

For scale, the same positions are also scored by the best context-free predictor learnt from the training split
(the unigram distribution of its non-special tokens, add-one smoothed): `unigram_mlm_accuracy` (always answer the
most frequent token) and `unigram_mlm_loss`. A model that has learnt nothing from context sits at these values,
far above the 1/vocab chance level — so it is these a model must beat.

The shards must have been built with the checkpoint's tokenizer (sha256 of its tokenizer.json, checked against the
manifest): otherwise the ids would mean other words and the scores nothing.

A split without instances has nothing to score: a small corpus can hold out no document at all (the held-out split
is drawn by a hash of each document's key, `preprocess.heldout_fraction`, a few percent: ten documents usually
give none). `empty_split` says so from the manifest, before any model runs; the evaluation stage then skips the
held-out scores with one warning line and runs the tasks (evaluation/run.py), and `evaluate_intrinsic` refuses
such a split with the same words.

    from evaluation.intrinsic import evaluate_intrinsic
    scores = evaluate_intrinsic(model, shard_dir, tokenizer_sha256, IntrinsicConfig(), torch.device("cpu"))
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from bertfactory.errors import ContractError
from preprocessing.shards import MANIFEST_NAME, Manifest, ShardSet, read_manifest
from training.data import IGNORE_INDEX, collate, dynamic_masker, masked_at_read_time
from training.models.bert.model import BertForPreTraining, chance_mlm_accuracy

from .config import IntrinsicConfig
from .results import nsp_one_label_note

logger = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_intrinsic(model: BertForPreTraining, shard_dir: Path, tokenizer_sha256: str, cfg: IntrinsicConfig,
                       device: torch.device) -> dict:
    """Score `model` on `cfg.split` of the shard set in `shard_dir`, in row order, `cfg.batch_size` rows at a time."""
    shards = ShardSet.open(shard_dir, cfg.split, tokenizer_sha256=tokenizer_sha256)
    if len(shards) == 0:
        raise ContractError(no_instances(shard_dir, cfg.split, shards.manifest))
    if shards.k and cfg.mask_variant >= shards.k:  # k = 0: dynamic masking, mask_variant is the epoch drawn below
        raise ContractError(f"{shard_dir}: evaluate.intrinsic.mask_variant={cfg.mask_variant} but the shards hold only "
                            f"{shards.k} mask variant(s)")
    longest = int(shards.lengths().max())
    if longest > model.config.max_position_embeddings:
        raise ContractError(f"{shard_dir}: split '{cfg.split}' has {longest}-token instances but the model has only "
                            f"{model.config.max_position_embeddings} positions")
    pad_id = shards.manifest.tokenizer.special_ids.get("pad")
    if pad_id is None:
        raise ContractError(f"{shard_dir}/manifest.json: tokenizer.special_ids has no 'pad'")

    unigram = _unigram_log_probs(shard_dir, tokenizer_sha256, model.config.vocab_size,
                                 shards.manifest.tokenizer.special_ids.values())
    unigram_top = int(unigram.argmax())
    unigram_correct = 0
    unigram_loss_sum = 0.0

    model.eval()
    masker = dynamic_masker(shards) if shards.k == 0 else None
    rows = len(shards)
    batches = math.ceil(rows / cfg.batch_size)
    if cfg.max_batches is not None:
        batches = min(batches, cfg.max_batches)
    mlm_correct = mlm_count = nsp_correct = nsp_instances = instances = 0
    nsp_labels = [0, 0]  # instances per NSP label (0 IsNext / in order, 1 NotNext / swapped)
    mlm_loss_sum = nsp_loss_sum = 0.0
    for b in tqdm(range(batches), desc=f"intrinsic ({cfg.split})", unit="batch", disable=None, leave=False):
        chunk = [shards.instance(i, cfg.mask_variant) for i in range(b * cfg.batch_size, min(rows, (b + 1) * cfg.batch_size))]
        if masker is not None:  # dynamic-masking shards: the masks the loader would draw in epoch mask_variant
            chunk = [masked_at_read_time(masker, inst, cfg.mask_variant, b * cfg.batch_size + i)
                     for i, inst in enumerate(chunk)]
        max_predictions = max(1, max(len(inst.mask_positions) for inst in chunk))
        batch = {k: v.to(device) for k, v in collate(chunk, pad_id, max_predictions).items()}
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_positions"],
                    batch["masked_labels"], batch["nsp_labels"])
        labels = batch["masked_labels"][batch["masked_labels"] != IGNORE_INDEX]
        logits = out["mlm_logits"].float()
        mlm_correct += int((logits.argmax(-1) == labels).sum())
        mlm_count += labels.numel()
        label_ids = labels.cpu().numpy()
        unigram_correct += int((label_ids == unigram_top).sum())
        unigram_loss_sum -= float(unigram[label_ids].sum())
        mlm_loss_sum += float(F.cross_entropy(logits, labels, reduction="sum")) if labels.numel() else 0.0
        if out.get("nsp_logits") is not None:  # models without a sentence head (RoBERTa, ...) have no NSP score
            nsp_logits = out["nsp_logits"].float()
            nsp_correct += int((nsp_logits.argmax(-1) == batch["nsp_labels"]).sum())
            nsp_loss_sum += float(F.cross_entropy(nsp_logits, batch["nsp_labels"], reduction="sum"))
            nsp_instances += len(chunk)
            for label in (0, 1):
                nsp_labels[label] += int((batch["nsp_labels"] == label).sum())
        instances += len(chunk)
    if mlm_count == 0:
        raise ContractError(f"{shard_dir}: the evaluated '{cfg.split}' instances have no masked positions")
    mlm_loss = mlm_loss_sum / mlm_count
    scores = {
        "split": cfg.split,
        "mask_variant": cfg.mask_variant,
        "instances": instances,
        "masked_tokens": mlm_count,
        "mlm_accuracy": mlm_correct / mlm_count,
        "mlm_loss": mlm_loss,
        "mlm_perplexity": math.exp(min(mlm_loss, 700.0)),  # exp overflows a float past ~709
        "nsp_accuracy": nsp_correct / nsp_instances if nsp_instances else None,
        "nsp_loss": nsp_loss_sum / nsp_instances if nsp_instances else None,
        "nsp_label_counts": nsp_labels if nsp_instances else None,
        "chance_mlm_accuracy": chance_mlm_accuracy(model.config.vocab_size),
        "unigram_mlm_accuracy": unigram_correct / mlm_count,
        "unigram_mlm_loss": unigram_loss_sum / mlm_count,
    }
    note = nsp_one_label_note(scores)
    if note:
        logger.warning("held-out NSP accuracy %.4f on split '%s' is %s", scores["nsp_accuracy"], cfg.split, note)
    if cfg.pseudo_perplexity_instances:
        scores.update(pseudo_perplexity(model, shards, cfg.pseudo_perplexity_instances, cfg.batch_size, device))
    logger.info("intrinsic on %d %s instances: MLM accuracy %.4f (loss %.4f; unigram baseline %.4f, loss %.4f), "
                "NSP accuracy %s", instances, cfg.split, scores["mlm_accuracy"], mlm_loss,
                scores["unigram_mlm_accuracy"], scores["unigram_mlm_loss"],
                "-" if scores["nsp_accuracy"] is None else f"{scores['nsp_accuracy']:.4f}")
    return scores


def empty_split(shard_dir: Path, split: str) -> str | None:
    """Why `split` of the shard set in `shard_dir` has nothing to score (its manifest lists no instance in it), else
    None; None too when there is no manifest or no such split, which ShardSet.open refuses, naming them."""
    if not (Path(shard_dir) / MANIFEST_NAME).is_file():
        return None
    manifest = read_manifest(shard_dir)
    info = manifest.splits.get(split)
    if info is None or info.rows > 0:
        return None
    return no_instances(shard_dir, split, manifest)


def no_instances(shard_dir: Path, split: str, manifest: Manifest) -> str:
    """The message for an empty `split`: how many of the corpus's documents went to it and, for the held-out
    split, the setting that gives it some."""
    docs = manifest.counts.get("docs")
    docs = {k: v for k, v in docs.items() if isinstance(v, int)} if isinstance(docs, dict) else {}
    known = f" ({docs[split]} of the corpus's {sum(docs.values())} documents in it)" if split in docs else ""
    fix = ("; preprocess more documents or set a larger preprocess.heldout_fraction to get held-out scores"
           if split == "heldout" else "")
    return f"{shard_dir}: split '{split}' has no instances to evaluate on{known}{fix}"


@torch.no_grad()
def pseudo_perplexity(model, shards: ShardSet, instances: int, batch_size: int, device: torch.device) -> dict:
    """Pseudo-perplexity of a masked LM (Salazar et al. 2020, "Masked Language Model Scoring"): every real,
    non-special token of the first `instances` rows (their original text: the stored masks are undone) is replaced
    by [MASK] in turn and scored given all the others; PPPL = exp(-mean log p(token | rest)). Unlike the MLM loss
    above, which scores 15 % of the tokens with the rest visible, it scores every token, so it is comparable to a
    perplexity over the same text."""
    special = set(shards.manifest.tokenizer.special_ids.values())
    mask_id = shards.manifest.tokenizer.special_ids.get("mask")
    if mask_id is None:
        raise ContractError(f"{shards.directory}/manifest.json: tokenizer.special_ids has no 'mask'")
    total_log_prob = 0.0
    tokens = 0
    rows = min(instances, len(shards))
    for index in tqdm(range(rows), desc="pseudo-perplexity", unit="instance", disable=None, leave=False):
        inst = shards.instance(index, 0)
        ids = torch.tensor(np.asarray(inst.input_ids, dtype=np.int64))
        length = ids.numel()
        token_types = torch.zeros(length, dtype=torch.int64)
        token_types[inst.len_a:] = 1
        positions = [p for p in range(length) if int(ids[p]) not in special]
        for start in range(0, len(positions), batch_size):
            chunk = torch.tensor(positions[start:start + batch_size])
            n = chunk.numel()
            batch_ids = ids.repeat(n, 1)
            batch_ids[torch.arange(n), chunk] = mask_id  # one masked token per copy
            out = model(batch_ids.to(device), token_types.repeat(n, 1).to(device),
                        torch.ones(n, length, dtype=torch.int64, device=device), chunk[:, None].to(device),
                        ids[chunk][:, None].to(device), None)
            log_probs = F.log_softmax(out["mlm_logits"].float(), dim=-1)
            total_log_prob += float(log_probs.gather(1, ids[chunk][:, None].to(device)).sum())
            tokens += n
    if tokens == 0:
        raise ContractError(f"{shards.directory}: no real tokens to score for the pseudo-perplexity")
    mean_nll = -total_log_prob / tokens
    return {"pseudo_perplexity": math.exp(min(mean_nll, 700.0)), "pseudo_perplexity_tokens": tokens,
            "pseudo_perplexity_instances": rows}


def _unigram_log_probs(shard_dir: Path, tokenizer_sha256: str, vocab_size: int, special_ids) -> np.ndarray:
    """log p(token) of the training split's non-special tokens, add-one smoothed (specials are never masked)."""
    train = ShardSet.open(shard_dir, "train", tokenizer_sha256=tokenizer_sha256, verify=False)
    counts = train.token_counts(vocab_size).astype(np.float64) + 1.0
    counts[[i for i in special_ids if 0 <= i < vocab_size]] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(counts / counts.sum())
