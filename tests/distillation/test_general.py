"""General distillation on pretraining shards through the one loop (training.trainer.Trainer): DistilBERT's triple
loss and TinyBERT's intermediate-layer loss fall; runs are deterministic."""

import dataclasses

import torch

from bertfactory.io import sha256_file
from training.data import PretrainBatches
from distillation.layer_map import tinybert_map
from distillation.loop import (DistilBertObjective, DistillModel, Teacher, TinyBertIntermediateObjective,
                                   run_distillation)
from distillation.models import Projections, distilbert_student, narrow_student
from training.models.bert.model import BertConfig, BertForPreTraining


def _teacher(run) -> Teacher:
    """A tiny random teacher; initializer_range 0.2 makes its MLM logits and states far from a fresh 0.02 student,
    so there is something to distil (the test is about the loop minimising the objective)."""
    cfg = BertConfig(vocab_size=45, hidden_size=32, num_layers=4, num_heads=2, intermediate_size=64,
                     max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0, initializer_range=0.2)
    torch.manual_seed(0)
    return Teacher(BertForPreTraining(cfg), True, sha256_file(run / "tokenizer" / "tokenizer.json"), "tiny teacher")


def _batches(run):
    return PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), 8, seed=0)


def test_distilbert_triple_loss_falls(shared_tiny_run, tmp_path):
    teacher = _teacher(shared_tiny_run)
    student = distilbert_student(teacher.model)
    with torch.no_grad():  # keep the copied structure but move the student away from the teacher
        torch.manual_seed(1)
        for p in student.parameters():
            p.mul_(0.1)
    records = run_distillation(DistillModel(student), DistilBertObjective(teacher), _batches(shared_tiny_run),
                               steps=60, learning_rate=3e-3, metrics_path=tmp_path / "m.jsonl", log_every=10)
    first, last = records[0], records[-1]
    assert {"ce_loss", "mlm_loss", "cos_loss"} <= set(first)
    # the MLM term (weight 2, a 45-word vocabulary) moves slowest; the distillation terms at least halve
    assert last["loss"] < 0.9 * first["loss"], (first, last)
    assert last["ce_loss"] < 0.5 * first["ce_loss"] and last["cos_loss"] < 0.5 * first["cos_loss"], (first, last)
    # teacher untouched
    assert all(not p.requires_grad for p in teacher.model.parameters())


def test_tinybert_general_narrow_student_loss_falls_and_is_deterministic(shared_tiny_run, tmp_path):
    teacher = _teacher(shared_tiny_run)

    def run(path):
        student = narrow_student(dataclasses.replace(teacher.model.config, initializer_range=0.02), hidden_size=16, num_layers=2, intermediate_size=32, seed=0)
        torch.manual_seed(0)
        model = DistillModel(student, Projections(16, 32))
        objective = TinyBertIntermediateObjective(teacher, tinybert_map(4, 2, "uniform"))
        return run_distillation(model, objective, _batches(shared_tiny_run), steps=40, learning_rate=3e-3,
                                metrics_path=path, log_every=5)

    records = run(tmp_path / "a.jsonl")
    assert records[-1]["loss"] < 0.7 * records[0]["loss"], records
    assert records[0]["attn_loss"] > 0 and records[0]["emb_loss"] > 0
    again = run(tmp_path / "b.jsonl")
    strip = lambda rs: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rs]
    assert strip(records) == strip(again)
