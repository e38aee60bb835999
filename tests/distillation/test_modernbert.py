"""A ModernBERT teacher through distillation: layer-copied ModernBERT students keep each copied layer's attention
kind (global / sliding-window), narrow ModernBERT and BERT students learn hidden states and attention scores across
attention kinds (a local layer's scores only inside its window), and tiny general-distillation runs on the shared
tiny shards finish with finite, falling losses."""

import json
import math

import pytest
import torch

from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file
from distillation import losses
from distillation.layer_map import attention_kinds, tinybert_map
from distillation.loop import DistilBertObjective, DistillModel, Teacher, TinyBertIntermediateObjective, run_distillation
from distillation.models import Projections, distilbert_student, narrow_student
from distillation.outputs import attended_pairs, encoder_outputs
from training.data import PretrainBatches
from training.models.bert.model import BertForPreTraining
from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM

# six layers, global at 0 and 3; rows of the tiny shards are 12..32 tokens, so the window of 4 on each side binds
TEACHER = dict(vocab_size=45, hidden_size=32, num_layers=6, num_heads=2, intermediate_size=48,
               max_position_embeddings=32, local_attention=8, global_attn_every_n_layers=3)


def _teacher_model(**overrides) -> ModernBertForMaskedLM:
    torch.manual_seed(0)
    return ModernBertForMaskedLM(ModernBertConfig(**{**TEACHER, **overrides}))


def _teacher(run) -> Teacher:
    """initializer_range 0.2 puts the teacher's logits and states far from a fresh 0.02 student: something to
    distil (as tests/distillation/test_general.py's BERT teacher)."""
    return Teacher(_teacher_model(initializer_range=0.2), True, sha256_file(run / "tokenizer" / "tokenizer.json"),
                   "tiny ModernBERT teacher")


def _batches(run):
    return PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), 8, seed=0)


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 45, (2, 20), generator=g)
    mask = torch.tensor([[1] * 20, [1] * 14 + [0] * 6])
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}


def test_layer_copied_students_keep_each_layers_attention_kind():
    teacher = _teacher_model()
    assert attention_kinds(teacher.config) == ["global", "local", "local"] * 2
    student = distilbert_student(teacher)  # teacher layers 1, 3, 5: global, local, local
    assert isinstance(student, ModernBertForMaskedLM)
    assert student.config.global_attn_every_n_layers == 3 and student.config.local_attention == 8
    t, s = teacher.state_dict(), student.state_dict()
    for s_idx, t_idx in ((0, 0), (1, 2), (2, 4)):
        for name in ("attention.self.query.weight", "intermediate.dense.weight", "output.dense.weight"):
            assert torch.equal(s[f"bert.encoder.layer.{s_idx}.{name}"], t[f"bert.encoder.layer.{t_idx}.{name}"])
    for name in ("bert.embeddings.word_embeddings.weight", "bert.final_norm.weight", "mlm_head.dense.weight"):
        assert torch.equal(s[name], t[name])
    # the kinds decide the student's pattern: layers 1, 3, 4 are global, local, global -> global every 2
    assert distilbert_student(teacher, [1, 3, 4]).config.global_attn_every_n_layers == 2
    assert attention_kinds(distilbert_student(_teacher_model(global_attn_every_n_layers=2)).config) == ["global"] * 3
    # every teacher layer copied is the teacher
    b = _batch()
    assert torch.equal(distilbert_student(teacher, list(range(1, 7))).eval().bert(**b), teacher.eval().bert(**b))
    with pytest.raises(ConfigError, match="global, global, local|'global', 'global', 'local'"):
        distilbert_student(teacher, [1, 4, 5])  # no 'global every n' pattern has layers 0 and 1 global, 2 local
    with pytest.raises(ConfigError, match="student layer 1 cannot take teacher layer 4"):
        distilbert_student(teacher, [4, 5])  # ModernBERT's first layer has no attention norm, the others do


def test_local_layers_compare_scores_inside_their_window_only():
    teacher = _teacher_model().eval()
    b = _batch()
    pairs = attended_pairs(teacher.config, b["attention_mask"])
    real = b["attention_mask"].bool()
    both = (real[:, :, None] & real[:, None, :])[:, None]
    near = ((torch.arange(20)[:, None] - torch.arange(20)[None, :]).abs() <= 4)[None, None]
    assert torch.equal(pairs[0], both) and torch.equal(pairs[3], both)
    assert torch.equal(pairs[1], both & near) and torch.equal(pairs[5], both & near)
    assert attended_pairs(narrow_student(teacher.config, 16, 2, 32, architecture="bert").config,
                          b["attention_mask"])[1].equal(both)  # BERT's layers attend globally
    with torch.no_grad():
        _, scores = encoder_outputs(teacher.bert, b, with_scores=True)
    student_scores = scores[1] + 0.5
    inside = losses.attention_mse(student_scores, scores[1], b["attention_mask"], pairs[1])
    far = student_scores.masked_fill(~near, 1e3)  # scores the local layer never feeds its softmax
    assert losses.attention_mse(far, scores[1], b["attention_mask"], pairs[1]) == inside
    assert float(inside) == pytest.approx(0.25)
    assert losses.attention_mse(far, scores[1], b["attention_mask"]) > 1e3  # without the window: every real pair


def test_modernbert_distilbert_general_run_losses_fall(shared_tiny_run, tmp_path):
    teacher = _teacher(shared_tiny_run)
    student = distilbert_student(teacher.model)
    with torch.no_grad():  # keep the copied structure but move the student away from the teacher (noise: the
        torch.manual_seed(1)  # pre-LN layers and norms make a BERT-style 0.1 scaling nearly harmless here)
        for p in student.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    records = run_distillation(DistillModel(student), DistilBertObjective(teacher), _batches(shared_tiny_run),
                               steps=60, learning_rate=3e-3, metrics_path=tmp_path / "m.jsonl", log_every=10)
    first, last = records[0], records[-1]
    assert all(math.isfinite(r[k]) for r in records for k in ("loss", "ce_loss", "mlm_loss", "cos_loss"))
    assert last["loss"] < 0.8 * first["loss"], (first, last)
    assert last["ce_loss"] < 0.5 * first["ce_loss"] and last["cos_loss"] < first["cos_loss"], (first, last)
    assert all(not p.requires_grad for p in teacher.model.parameters())


@pytest.mark.parametrize("architecture", ["teacher", "bert"])
def test_tinybert_general_run_across_attention_kinds_losses_fall(shared_tiny_run, tmp_path, architecture):
    # g(m) = 2m into 3 student layers: teacher layers 2 (local), 4 (global), 6 (local); the ModernBERT student's
    # layers are global, local, local, the BERT student's all global, so every kind meets every other
    teacher = _teacher(shared_tiny_run)
    student = narrow_student(ModernBertConfig(**TEACHER), hidden_size=16, num_layers=3, intermediate_size=32,
                             seed=0, architecture=architecture)
    assert type(student) is (ModernBertForMaskedLM if architecture == "teacher" else BertForPreTraining)
    torch.manual_seed(0)
    layer_map = tinybert_map(6, 3, "uniform")
    assert layer_map == {0: 0, 1: 2, 2: 4, 3: 6}
    records = run_distillation(DistillModel(student, Projections(16, 32)),
                               TinyBertIntermediateObjective(teacher, layer_map), _batches(shared_tiny_run),
                               steps=80, learning_rate=3e-3, metrics_path=tmp_path / "m.jsonl", log_every=10)
    parts = ("loss", "emb_loss", "hidden_loss", "attn_loss")
    assert all(math.isfinite(r[k]) for r in records for k in parts)
    assert records[0]["attn_loss"] > 0 and records[0]["emb_loss"] > 0
    assert records[-1]["loss"] < 0.65 * records[0]["loss"], records
    assert records[-1]["attn_loss"] < 0.8 * records[0]["attn_loss"], records


@pytest.mark.parametrize("student", ["teacher", "bert"])
def test_distill_stage_with_a_modernbert_teacher_checkpoint(run_factory, student):
    # the whole stage (DistilBERT, PKD, TinyBERT with attention maps, augmentation) from a saved ModernBERT model
    # directory, scored on the real movie_sentiment task; the TinyBERT student is ModernBERT or BERT
    from distillation.config import DistillConfig
    from distillation.stage import run_distill
    from training.checkpoint import save_pretrained

    from .test_stage import TINY

    run = run_factory("run", train_rows=32, heldout_rows=8, max_seq_len=24)
    teacher = _teacher_model(num_layers=4, global_attn_every_n_layers=2, hidden_size=16, intermediate_size=32)
    save_pretrained(teacher, teacher.config, run / "tokenizer" / "tokenizer.json", run / "pretrain" / "final")
    cfg = DistillConfig.model_validate({**TINY, "tinybert": {**TINY["tinybert"], "student": student}})
    results = run_distill(cfg, run)
    assert set(results["methods"]) == {"distilbert", "pkd_skip", "tinybert"}
    for name, r in results["methods"].items():
        assert 0.0 <= r["student"]["score"] <= 1.0 and r["student"]["params"] < r["teacher"]["params"], name
    shape = results["methods"]["tinybert"]["student_shape"]
    assert shape["architecture"] == ("ModernBertForMaskedLM" if student == "teacher" else "BertForPreTraining")
    records = [json.loads(line) for line in (run / "distill" / "metrics.jsonl").read_text().splitlines()]
    assert records and all(math.isfinite(r["loss"]) for r in records)
