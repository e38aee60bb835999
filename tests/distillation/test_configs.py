"""The 12-layer distillation recipe (configs/teacher-12layer.yaml + configs/distill-12layer.yaml) validates and
describes the shapes it promises: DistilBERT 6-of-12, PKD-Skip 6 layers, TinyBERT 4 x 312 with attention maps
(heads equal to the teacher's). Nothing is trained here; benchmarks/RESULTS.md has the measured run."""

from pathlib import Path

import pytest
import torch

from flows.recipe import load_recipe
from distillation.layer_map import every_other, pkd_map, tinybert_map
from distillation.models import Projections, distilbert_student, narrow_student, num_parameters
from distillation.stage import load_distill_config
from training.models.bert.model import BertConfig, BertForPreTraining

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def configs():
    return load_recipe(REPO / "configs" / "teacher-12layer.yaml"), load_distill_config(REPO / "configs" / "distill-12layer.yaml")


def test_twelve_layer_recipe_shapes(configs):
    recipe, cfg = configs
    m = recipe.model
    assert (m.num_layers, m.hidden_size, m.num_heads) == (12, 256, 4)
    assert cfg.finetune.max_seq_len <= recipe.preprocess.instances.max_seq_len <= m.max_position_embeddings
    # the teacher is a checkpoint the recipe writes and keeps (keep_last 2: step 60 survives step 120)
    step = int(cfg.teacher.checkpoint.removeprefix("pretrain/checkpoints/step-"))
    p = recipe.pretrain
    assert cfg.teacher.hf is None and step % p.save_every == 0 and p.max_steps // p.save_every <= p.keep_last
    assert every_other(m.num_layers) == [1, 3, 5, 7, 9, 11]
    assert cfg.distilbert.teacher_layers is None and cfg.distilbert.alpha_ce > 0
    assert pkd_map(m.num_layers, cfg.pkd.student_layers, cfg.pkd.strategy) == {1: 2, 2: 4, 3: 6, 4: 8, 5: 10}
    t = cfg.tinybert
    assert (t.num_layers, t.hidden_size, t.intermediate_size) == (4, 312, 1200)
    assert t.attention and t.num_heads == m.num_heads and t.hidden_size % t.num_heads == 0
    assert tinybert_map(m.num_layers, t.num_layers, t.mapping) == {0: 0, 1: 3, 2: 6, 3: 9, 4: 12}


def test_twelve_layer_students_are_smaller(configs):
    """The students the recipe builds from a teacher of that shape (random weights: only sizes are checked)."""
    recipe, cfg = configs
    m, t = recipe.model, cfg.tinybert
    torch.manual_seed(0)
    teacher = BertForPreTraining(BertConfig(8000, m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size,
                                            m.max_position_embeddings))
    six = distilbert_student(teacher)
    tiny = narrow_student(teacher.config, t.hidden_size, t.num_layers, t.intermediate_size, t.num_heads, seed=0)
    assert six.config.num_layers == 6 and six.config.hidden_size == 256
    assert tiny.config.num_heads == 4 and Projections(t.hidden_size, m.hidden_size).needed
    layer = lambda model: num_parameters(model.bert.encoder.layer[0])  # noqa: E731
    assert 4 * layer(tiny) < 12 * layer(teacher) and 6 * layer(six) * 2 == 12 * layer(teacher)
