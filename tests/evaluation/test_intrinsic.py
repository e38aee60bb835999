"""Intrinsic evaluation: scores computed batch-wise equal a plain per-instance loop, max_batches limits the work,
and shards built with another tokenizer are refused."""

import math

import pytest
import torch
import torch.nn.functional as F

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file
from evaluation.config import IntrinsicConfig
from evaluation.intrinsic import evaluate_intrinsic
from preprocessing.shards import ShardSet
from training.checkpoint import load_pretrained

CPU = torch.device("cpu")


def manual_scores(model, shard_dir, variant):
    """One instance at a time, no padding, heads applied by hand."""
    shards = ShardSet.open(shard_dir, "heldout")
    correct = count = nsp_correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for i in range(len(shards)):
            inst = shards.instance(i, variant)
            ids = torch.tensor(inst.input_ids, dtype=torch.long)
            positions = torch.tensor(inst.mask_positions, dtype=torch.long)
            labels = ids[positions].clone()
            ids[positions] = torch.tensor(inst.mask_tokens, dtype=torch.long)
            types = torch.zeros_like(ids)
            types[inst.len_a:] = 1
            hidden = model.bert(ids[None], types[None], torch.ones_like(ids)[None])[0]
            logits = model.mlm_head(hidden[positions], model.bert.embeddings.word_embeddings.weight)
            correct += int((logits.argmax(-1) == labels).sum())
            count += len(labels)
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            nsp = model.nsp_head(model.bert.pooler(hidden[None]))
            nsp_correct += int(nsp.argmax(-1).item() == inst.nsp_label)
    return correct / count, loss_sum / count, nsp_correct / len(shards), count, len(shards)


@pytest.mark.parametrize("variant", [0, 1])
def test_matches_a_manual_per_instance_loop(eval_run, variant):
    model, _, tokenizer = load_pretrained(eval_run / "pretrain" / "final")
    cfg = IntrinsicConfig(batch_size=7, mask_variant=variant)  # 7 does not divide 96: a short last batch
    scores = evaluate_intrinsic(model, eval_run / "shards", sha256_file(tokenizer), cfg, CPU)
    mlm_acc, mlm_loss, nsp_acc, count, instances = manual_scores(model, eval_run / "shards", variant)
    assert scores["instances"] == instances == 96
    heldout = ShardSet.open(eval_run / "shards", "heldout")
    not_next = sum(int(heldout.instance(i, variant).nsp_label) for i in range(len(heldout)))
    assert scores["nsp_label_counts"] == [96 - not_next, not_next] and 0 < not_next < 96
    assert scores["masked_tokens"] == count
    assert scores["mlm_accuracy"] == mlm_acc
    assert scores["nsp_accuracy"] == nsp_acc
    assert scores["mlm_loss"] == pytest.approx(mlm_loss, rel=1e-5)
    assert scores["mlm_perplexity"] == pytest.approx(math.exp(mlm_loss), rel=1e-4)
    # the fixture model was trained a few steps: its answers are neither all wrong nor all right
    assert 0 < scores["mlm_accuracy"] < 1
    assert scores["chance_mlm_accuracy"] == 1 / model.config.vocab_size


def test_unigram_baseline_is_the_train_splits_token_distribution(eval_run):
    import collections

    import numpy as np

    model, _, tokenizer = load_pretrained(eval_run / "pretrain" / "final")
    scores = evaluate_intrinsic(model, eval_run / "shards", sha256_file(tokenizer), IntrinsicConfig(), CPU)
    train, heldout = ShardSet.open(eval_run / "shards", "train"), ShardSet.open(eval_run / "shards", "heldout")
    specials = set(train.manifest.tokenizer.special_ids.values())
    counts = collections.Counter(int(t) for inst in train for t in inst.input_ids if int(t) not in specials)
    vocab = model.config.vocab_size
    total = sum(counts.values()) + vocab - len([i for i in specials if i < vocab])
    top = max(counts, key=lambda t: (counts[t], -t))
    labels = [int(inst.input_ids[p]) for inst in heldout for p in inst.mask_positions]
    assert scores["unigram_mlm_accuracy"] == sum(label == top for label in labels) / len(labels)
    expected_loss = -np.mean([np.log((counts[label] + 1) / total) for label in labels])
    assert scores["unigram_mlm_loss"] == pytest.approx(expected_loss, rel=1e-9)


def test_max_batches_limits_the_instances(eval_run):
    model, _, tokenizer = load_pretrained(eval_run / "pretrain" / "final")
    scores = evaluate_intrinsic(model, eval_run / "shards", sha256_file(tokenizer),
                                IntrinsicConfig(batch_size=10, max_batches=2), CPU)
    assert scores["instances"] == 20


def test_unknown_variant_is_refused(eval_run):
    model, _, tokenizer = load_pretrained(eval_run / "pretrain" / "final")
    with pytest.raises(ContractError, match="mask_variant=5 but the shards hold only 2"):
        evaluate_intrinsic(model, eval_run / "shards", sha256_file(tokenizer), IntrinsicConfig(mask_variant=5), CPU)


def test_shards_of_another_tokenizer_are_refused(eval_run, tmp_path, make_tokenizer):
    # A checkpoint whose tokenizer differs from the one the shards were built with.
    other = make_tokenizer(tmp_path / "other.json", 500, 300)
    model, _, _ = load_pretrained(eval_run / "pretrain" / "final")
    with pytest.raises(ContractError, match="built with tokenizer sha256 .* but the tokenizer given has sha256"):
        evaluate_intrinsic(model, eval_run / "shards", sha256_file(other), IntrinsicConfig(), CPU)


def test_a_heldout_split_of_isnext_pairs_only_is_scored_and_said(eval_run, tmp_path, caplog):
    """One held-out document gives IsNext pairs only (a NotNext B comes from another document): the accuracy is
    still the share of pairs right, but over one label, and the scores and a warning say so (it used to print
    1.0000 or 0.0000 with no word that no NotNext pair existed)."""
    import logging
    import shutil

    from evaluation.results import nsp_one_label_note
    from tests.evaluation.conftest import write_shards

    run = shutil.copytree(eval_run, tmp_path / "run")
    tokenizer = run / "tokenizer" / "tokenizer.json"
    rows = {}
    for split in ("train", "heldout"):
        shards = ShardSet.open(run / "shards", split)
        rows[split] = [{"input_ids": [int(t) for t in inst.input_ids], "len_a": inst.len_a,
                        "nsp_label": 0 if split == "heldout" else int(inst.nsp_label),
                        "mask_positions": [[int(p) for p in shards.instance(i, v).mask_positions] for v in range(2)],
                        "mask_tokens": [[int(t) for t in shards.instance(i, v).mask_tokens] for v in range(2)],
                        "doc_id": i} for i, inst in ((i, shards.instance(i, 0)) for i in range(len(shards)))]
    shutil.rmtree(run / "shards")
    write_shards(run / "shards", tokenizer, rows["train"], rows["heldout"], shards.manifest.tokenizer.vocab_size, 2,
                 shards.manifest.instance_format["max_seq_len"])
    model, _, _ = load_pretrained(run / "pretrain" / "final")
    with caplog.at_level(logging.WARNING, logger="evaluation.intrinsic"):
        scores = evaluate_intrinsic(model, run / "shards", sha256_file(tokenizer), IntrinsicConfig(), CPU)
    assert scores["nsp_label_counts"] == [96, 0]
    predicted_isnext = scores["nsp_accuracy"]  # every pair is IsNext: the accuracy is the share answered IsNext
    note = ("over 96 IsNext pairs and no NotNext pair, as the held-out split has too few documents to draw one from "
            "another: always answering IsNext would score 1.0")
    assert nsp_one_label_note(scores) == note
    assert [r.getMessage() for r in caplog.records] == [
        f"held-out NSP accuracy {predicted_isnext:.4f} on split 'heldout' is {note}"]
