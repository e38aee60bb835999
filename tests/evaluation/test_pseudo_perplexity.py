"""Pseudo-perplexity (Salazar et al. 2020): every real token masked in turn, scored given the rest — checked against
a direct loop over positions."""

import math

import numpy as np
import torch
import torch.nn.functional as F

from preprocessing.shards import ShardSet
from training.models.bert.model import BertConfig, BertForPreTraining
from evaluation.intrinsic import pseudo_perplexity


def test_pseudo_perplexity_equals_a_direct_loop_over_positions(eval_run):
    shards = ShardSet.open(eval_run / "shards", "heldout")
    vocab = shards.manifest.tokenizer.vocab_size
    mask_id = shards.manifest.tokenizer.special_ids["mask"]
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=vocab, hidden_size=16, num_layers=1, num_heads=2,
                                          intermediate_size=32, max_position_embeddings=64)).eval()
    scores = pseudo_perplexity(model, shards, instances=3, batch_size=7, device=torch.device("cpu"))
    special = set(shards.manifest.tokenizer.special_ids.values())
    nll, count = 0.0, 0
    with torch.no_grad():
        for index in range(3):
            inst = shards.instance(index, 0)
            ids = torch.tensor(np.asarray(inst.input_ids, dtype=np.int64))
            types = torch.zeros_like(ids)
            types[inst.len_a:] = 1
            for p in range(len(ids)):
                if int(ids[p]) in special:
                    continue
                masked = ids.clone()
                masked[p] = mask_id
                hidden = model.bert(masked[None], types[None], torch.ones_like(ids)[None])
                logits = model.mlm_head(hidden[0, p:p + 1], model.bert.embeddings.word_embeddings.weight)
                nll -= float(F.log_softmax(logits, -1)[0, ids[p]])
                count += 1
    assert scores["pseudo_perplexity_tokens"] == count and scores["pseudo_perplexity_instances"] == 3
    assert math.isclose(scores["pseudo_perplexity"], math.exp(nll / count), rel_tol=1e-5)
    assert 1.0 < scores["pseudo_perplexity"]
