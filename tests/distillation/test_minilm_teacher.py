"""The real MiniLM (sample `minilm`: an HF BertModel, 6 layers, hidden 384, 12 heads, no MLM head) as a teacher:
imported with training.hf.import_from_hf; logit distillation is refused with a hint; hidden-state + pre-softmax
attention distillation into a narrower 2-layer student of width 96 (learnable W_h / W_e) on real movie-review
sentences lowers the loss."""

import pytest
import torch

from bertfactory.errors import ConfigError
from bertfactory.samples import is_fetched
from evaluation.config import FinetuneConfig
from evaluation.encode import TextEncoder
from evaluation.finetune import prepare_task
from evaluation.tasks.registry import BUILTIN_TASKS
from distillation.config import DistillConfig
from distillation.layer_map import tinybert_map
from distillation.loop import (DistilBertObjective, DistillModel, TaskBatches, TinyBertIntermediateObjective,
                                   run_distillation)
from distillation.models import Projections, narrow_student
from distillation.stage import load_teacher

pytestmark = pytest.mark.skipif(not (is_fetched("minilm") and is_fetched("movie_reviews")),
                                reason="needs `bertfactory samples fetch minilm movie_reviews`")


def test_minilm_teacher_hidden_and_attention_distillation(tmp_path):
    cfg = DistillConfig.model_validate({"teacher": {"hf": "sample:minilm"}})
    teacher, tokenizer = load_teacher(cfg, tmp_path, tmp_path / "distill")
    assert not teacher.has_mlm_head and teacher.model.config.hidden_size == 384
    with pytest.raises(ConfigError, match="no trained MLM head.*hidden-state/attention"):
        DistilBertObjective(teacher)

    encoder = TextEncoder.from_file(tokenizer)
    ft = FinetuneConfig(max_seq_len=32, max_train_examples=32, max_eval_examples=8)
    task = prepare_task(BUILTIN_TASKS["movie_sentiment"](None), encoder, ft)
    student = narrow_student(teacher.model.config, hidden_size=96, num_layers=2, intermediate_size=192, seed=0)
    assert student.config.num_heads == 12
    torch.manual_seed(0)
    model = DistillModel(student, Projections(96, 384))
    objective = TinyBertIntermediateObjective(teacher, tinybert_map(6, 2, "uniform"))
    batches = TaskBatches(task.train.features, 8, seed=0, pad_id=encoder.pad_id)
    records = run_distillation(model, objective, batches, steps=12, learning_rate=2e-3,
                               metrics_path=tmp_path / "m.jsonl", log_every=4)
    assert records[-1]["loss"] < records[0]["loss"], records
    assert records[0]["attn_loss"] > 0 and records[0]["hidden_loss"] > 0 and records[0]["emb_loss"] > 0
