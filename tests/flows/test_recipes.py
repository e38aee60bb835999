"""Every recipe in configs/ validates and its model builds on the meta device (no memory); every full-size
member recipe has a tiny twin; the full recipes' sizes are the published ones (within 2 %)."""

from pathlib import Path

import pytest

from flows.recipe import load_recipe
from training.describe import count_parameters

ALL_CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
# distill-*.yaml configure the distillation stage (distillation/config.py), not a pipeline recipe
DISTILL_CONFIGS = [p for p in ALL_CONFIGS if p.stem.startswith("distill-")]
CONFIGS = [p for p in ALL_CONFIGS if p not in DISTILL_CONFIGS]
# full recipe -> (vocabulary its paper used, published size); None = no single published figure to hold it to
PUBLISHED = {
    "bert-base": (30522, 110e6), "bert-large": (30522, 335e6), "roberta-base": (50265, 125e6),
    "albert-base": (30000, 12e6), "albert-large": (30000, 18e6), "xlnet-base": (32000, 117e6),
    "spanbert-base": (28996, None), "electra-small": (30522, None), "xlm-base": (None, None),
    "transformer-xl": (None, None), "modernbert-base": (50368, 149e6),
}
# tiny twins of full recipes (configs/local.yaml is BERT's)
TWINS = {"bert-base": "local", "bert-large": "local", "roberta-base": "tiny-roberta", "albert-base": "tiny-albert",
         "albert-large": "tiny-albert", "xlnet-base": "tiny-xlnet", "spanbert-base": "tiny-spanbert",
         "electra-small": "tiny-electra", "xlm-base": "tiny-xlm", "transformer-xl": "tiny-transformer-xl",
         "modernbert-base": "tiny-modernbert"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_recipe_validates_and_builds_on_the_meta_device(path):
    recipe = load_recipe(path)
    vocab = recipe.preprocess.tokenizer.vocab_size
    total, embedding = count_parameters(recipe.model, vocab, recipe.pretrain.objective)
    assert 0 < embedding < total
    if path.stem in PUBLISHED or path.stem in TWINS.values():
        assert recipe.name == path.stem


@pytest.mark.parametrize("path", DISTILL_CONFIGS, ids=[p.stem for p in DISTILL_CONFIGS])
def test_every_distillation_config_validates(path):
    from distillation.stage import load_distill_config

    assert load_distill_config(path).task


def test_every_full_recipe_has_its_tiny_twin_and_the_published_size():
    names = {p.stem for p in CONFIGS}
    assert set(PUBLISHED) <= names, sorted(set(PUBLISHED) - names)
    for full, twin in TWINS.items():
        assert twin in names, f"{full} has no tiny twin {twin}.yaml"
        tiny = load_recipe(CONFIGS[0].parent / f"{twin}.yaml")
        full_recipe = load_recipe(CONFIGS[0].parent / f"{full}.yaml")
        # XLM's joint MLM + TLM schedule needs a second (parallel) shard set the flow does not build: its tiny twin
        # trains the MLM half on the run's own shards (configs/tiny-xlm.yaml; the joint run is tested in
        # tests/preprocessing/test_xlm_languages.py)
        expected = {"xlm_mlm_tlm": "xlm_mlm"}.get(full_recipe.pretrain.objective, full_recipe.pretrain.objective)
        assert tiny.pretrain.objective == expected, (full, twin)
    for name, (vocab, size) in PUBLISHED.items():
        if size is None:
            continue
        recipe = load_recipe(CONFIGS[0].parent / f"{name}.yaml")
        assert recipe.preprocess.tokenizer.vocab_size == vocab, name
        total, _ = count_parameters(recipe.model, vocab, recipe.pretrain.objective)
        assert abs(total - size) / size < 0.02, (name, total)


def test_a_section_with_every_key_commented_out_takes_its_defaults(tmp_path):
    # `pretrain:` with its keys commented out is YAML's null: it was refused as "'pretrain': Input should be a valid
    # dictionary ... (got None)"; tapt: null still means no tapt
    from evaluation.config import EvaluateConfig
    from training.pretrain_config import PretrainConfig

    path = tmp_path / "r.yaml"
    path.write_text("name: x\npretrain:\n#  max_steps: 5\nevaluate:\ntapt:\n")
    recipe = load_recipe(path, ["pretrain.learning_rate=0.001"])
    assert recipe.pretrain == PretrainConfig(learning_rate=0.001) and recipe.tapt is None
    assert recipe.evaluate == EvaluateConfig()
