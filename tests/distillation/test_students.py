"""Student construction from a teacher, the opt-in attention-score path, and the bad-input checks."""

import dataclasses

import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from distillation.loop import DistilBertObjective, Teacher
from distillation.models import Projections, check_tokenizers, distilbert_student, narrow_student
from distillation.outputs import encoder_outputs
from training.models.bert.model import BertConfig, BertForPreTraining

CFG = BertConfig(vocab_size=30, hidden_size=16, num_layers=4, num_heads=2, intermediate_size=32,
                 max_position_embeddings=16, hidden_dropout=0.0, attention_dropout=0.0)


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 30, (2, 7), generator=g)
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}


def test_distilbert_student_copies_every_other_layer():
    torch.manual_seed(0)
    teacher = BertForPreTraining(CFG)
    student = distilbert_student(teacher)
    assert student.config.num_layers == 2 and student.config.hidden_size == 16
    t, s = teacher.state_dict(), student.state_dict()
    for s_idx, t_idx in ((0, 0), (1, 2)):  # teacher layers 1 and 3 (1-based)
        for name in ("attention.self.query.weight", "output.dense.bias", "intermediate.dense.weight"):
            assert torch.equal(s[f"bert.encoder.layer.{s_idx}.{name}"], t[f"bert.encoder.layer.{t_idx}.{name}"])
    for name in ("bert.embeddings.word_embeddings.weight", "mlm_head.bias", "mlm_head.dense.weight",
                 "nsp_head.classifier.weight", "bert.pooler.dense.weight"):
        assert torch.equal(s[name], t[name])
    # a student made of all the teacher's layers is the teacher
    full = distilbert_student(teacher, [1, 2, 3, 4]).eval()
    b = _batch()
    assert torch.equal(full.bert(**b), teacher.eval().bert(**b))
    with pytest.raises(ConfigError, match="1..4"):
        distilbert_student(teacher, [1, 5])


def test_narrow_student_and_projections():
    student = narrow_student(CFG, hidden_size=8, num_layers=2, intermediate_size=16, seed=3)
    again = narrow_student(CFG, hidden_size=8, num_layers=2, intermediate_size=16, seed=3)
    assert student.config.num_heads == 2 and student.config.vocab_size == 30
    assert all(torch.equal(a, b) for a, b in zip(student.state_dict().values(), again.state_dict().values()))
    proj = Projections(8, 16)
    assert proj.layer().weight.shape == (16, 8) and proj.embedding() is not proj.layer()
    same = Projections(16, 16)
    assert same.layer() is None and sum(p.numel() for p in same.parameters()) == 0


def test_recorded_scores_match_sdpa_and_are_pre_softmax():
    torch.manual_seed(0)
    model = BertForPreTraining(CFG).eval()
    b = _batch()
    states_fast, none = encoder_outputs(model.bert, b)
    states_rec, scores = encoder_outputs(model.bert, b, with_scores=True)
    assert none is None and len(scores) == 4 and scores[0].shape == (2, 2, 7, 7)
    assert torch.allclose(states_fast[-1], states_rec[-1], atol=1e-5)
    # pre-softmax: q.k / sqrt(d) of layer 1 recomputed by hand from the embeddings
    attn = model.bert.encoder.layer[0].attention.self
    x = states_rec[0]
    q = attn.query(x).view(2, 7, 2, 8).transpose(1, 2)
    k = attn.key(x).view(2, 7, 2, 8).transpose(1, 2)
    assert torch.allclose(scores[0], q @ k.transpose(-1, -2) / 8 ** 0.5, atol=1e-5)
    assert all(m.score_sink is None for m in model.modules() if hasattr(m, "score_sink"))


def test_tokenizer_mismatch_names_both_sha256():
    with pytest.raises(ContractError, match="aaa.*bbb"):
        check_tokenizers("aaa", "bbb", "teacher/tokenizer.json", "student/tokenizer.json")
    check_tokenizers("aaa", "aaa", "t", "s")


def test_logit_distillation_without_mlm_head_suggests_hidden_losses():
    teacher = Teacher(BertForPreTraining(CFG), has_mlm_head=False, tokenizer_sha256="x", source="minilm")
    with pytest.raises(ConfigError, match="no trained MLM head.*hidden-state/attention"):
        DistilBertObjective(teacher)
    DistilBertObjective(teacher, alpha_ce=0.0)  # hidden-state (cosine) + MLM only is allowed


@pytest.mark.parametrize("hidden, heads, named", [
    (15, None, "tinybert.hidden_size 15 is not divisible by the student's 2 attention heads (the teacher's"),
    (16, 3, "tinybert.hidden_size 16 is not divisible by the student's 3 attention heads (tinybert.num_heads)"),
])
def test_a_student_width_its_heads_do_not_divide_is_one_config_error(hidden, heads, named):
    # was pydantic's ValidationError out of dataclasses.replace: a traceback from `bertfactory distill`
    with pytest.raises(ConfigError) as err:
        narrow_student(CFG, hidden_size=hidden, num_layers=2, intermediate_size=16, num_heads=heads)
    assert named in str(err.value) and "\n" not in str(err.value)
