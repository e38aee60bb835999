"""Unpadded fine-tuning (`evaluate.finetune.unpad`): the encoder runs on the real tokens only
(training/models/core/varlen.py). On every task type, for BERT's encoder and ModernBERT's (local and global layers),
a run trains the same batches to the same losses (up to float rounding) and scores the same as the padded run;
an encoder without the unpadded path is refused with one line naming the option."""

import math

import pytest
import torch

from evaluation.finetune import finetune_run, prepare_task
from evaluation.heads import TaskModel, has_unpadded_path
from tests.evaluation.test_finetune import BARS, CPU, finetune_settings, rule_task, text_encoder  # noqa: F401
from training.models.bert.model import BertConfig, BertModel
from training.models.modernbert.model import ModernBertConfig, ModernBertModel
from training.models.xlnet.model import XLNetConfig, XLNetModel


def bert(vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)  # no dropout in the encoder: the two paths would draw their masks over other shapes
    return BertModel(BertConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                                max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0))


def modernbert(vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)  # a local layer's window (8 tokens) shorter than most sentences here, then a global one
    return ModernBertModel(ModernBertConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=2,
                                            intermediate_size=48, max_position_embeddings=64,
                                            global_attn_every_n_layers=2, local_attention=16))


@pytest.mark.parametrize("make", [bert, modernbert], ids=["bert", "modernbert"])
@pytest.mark.parametrize("task_type", list(BARS))
def test_an_unpadded_run_trains_and_scores_as_the_padded_run(task_type, make, text_encoder):  # noqa: F811
    data = rule_task(task_type, 600 if task_type == "multiple-choice" else 240)
    cfg = finetune_settings(epochs=2, eval_batch_size=16)
    task = prepare_task(data, text_encoder, cfg)
    widths = [len(x) for x in task.train.features.ids]
    assert min(widths) < max(widths)  # batches with padding in them
    vocab = text_encoder.tokenizer.get_vocab_size()
    runs = {unpad: finetune_run(make(vocab), task, cfg.model_copy(update={"unpad": unpad}), cfg.learning_rate,
                                cfg.seed, CPU, text_encoder.pad_id, f"{task_type} unpad={unpad}")
            for unpad in (False, True)}
    padded, unpadded = runs[False], runs[True]
    assert unpadded.steps == padded.steps == 2 * math.ceil(len(task.train.features) / 8)
    for a, b in zip(padded.epochs, unpadded.epochs):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4, abs=1e-5)
    assert unpadded.best_epoch == padded.best_epoch
    for name, value in padded.test_metrics.items():  # rounding could flip a near-tie; none of these runs has one
        assert unpadded.test_metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-4), name
    assert unpadded.test_predictions == padded.test_predictions or task_type == "regression"


def test_an_encoder_without_an_unpadded_path_is_refused(text_encoder):  # noqa: F811
    vocab = text_encoder.tokenizer.get_vocab_size()
    xlnet = XLNetModel(XLNetConfig(vocab_size=vocab, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    assert has_unpadded_path(bert(vocab)) and has_unpadded_path(modernbert(vocab)) and not has_unpadded_path(xlnet)
    with pytest.raises(ValueError, match="evaluate.finetune.unpad: the XLNetModel encoder has no unpadded path"):
        TaskModel(xlnet, "classification", 2, 0.1, unpad=True)
    TaskModel(xlnet, "classification", 2, 0.1)  # padded, as always
