"""Config cross-checks happen when the recipe is loaded, naming the keys: model x pretrain combinations
(training/recipe_checks.py, through flows/recipe.py's Recipe validator) and pretrain-only ones (PretrainConfig);
pretrain() refuses the same combinations for callers without a recipe. TrainerSettings validates its values."""

from pathlib import Path

import pytest

from bertfactory.errors import ConfigError
from flows.recipe import load_recipe
from training.config import ModelConfig
from training.objectives import get_objective_spec
from training.pretrain_config import PretrainConfig
from training.recipe_checks import check_model_and_pretrain, model_pretrain_problems
from training.trainer_settings import TrainerSettings

LOCAL = Path(__file__).resolve().parents[2] / "configs" / "local.yaml"
TWO_STAGE = {"two_stage": True, "generator_size": 1.0, "generator_steps": 2}


def test_unpad_and_static_shapes_follow_the_architectures_declared_capabilities():
    assert model_pretrain_problems(ModelConfig(), PretrainConfig(objective="mlm", unpad=True, static_shapes=True)) == []
    problems = model_pretrain_problems(ModelConfig(), PretrainConfig(objective="plm", unpad=True, static_shapes=True))
    xlnet = get_objective_spec("plm").architecture
    supporting = "BertForPreTraining, ModernBertForMaskedLM (objectives mlm, mlm_nsp, mlm_sop, modernbert_mlm)"
    assert problems == [
        f"pretrain.unpad is only implemented for {supporting}; objective plm trains {xlnet}",
        f"pretrain.static_shapes is only implemented for {supporting}; objective plm trains {xlnet}"]
    with pytest.raises(ConfigError, match="pretrain.unpad is only implemented for BertForPreTraining"):
        check_model_and_pretrain(ModelConfig(), PretrainConfig(objective="electra", unpad=True))


def test_stacking_follows_the_declared_capability_and_a_modernbert_recipe_is_refused_when_it_loads():
    stacking = {"stages": [5]}
    for objective in ("mlm_nsp", "mlm_sbo", "xlm_mlm", "clm"):  # BERT, SpanBERT, XLM declare it
        assert model_pretrain_problems(ModelConfig(num_languages=2), PretrainConfig(
            objective=objective, max_steps=10, warmup_steps=0, stacking=stacking)) == [], objective
    for objective in ("modernbert_mlm", "electra", "plm", "txl_clm"):
        (problem,) = model_pretrain_problems(ModelConfig(), PretrainConfig(objective=objective, max_steps=10,
                                                                           warmup_steps=0, stacking=stacking))
        architecture = get_objective_spec(objective).architecture
        assert problem.startswith("pretrain.stacking is only implemented for BertForPreTraining, "
                                  "SpanBertForPreTraining, XlmForPreTraining (objectives ")
        assert problem.endswith(f"; objective {objective} trains {architecture}"), problem
    # before: the run trained up to the first stage and failed there, loading the copied layers strictly
    with pytest.raises(ConfigError, match=r"(?s)tiny-modernbert.yaml with overrides .*pretrain.stacking is only "
                                          r"implemented for .*objective modernbert_mlm trains ModernBertForMaskedLM"):
        load_recipe(LOCAL.parent / "tiny-modernbert.yaml", ["pretrain.stacking={stages: [100]}"])


def test_two_stage_electra_refuses_fsdp_and_accumulation():
    model = ModelConfig(electra=TWO_STAGE)
    assert model_pretrain_problems(model, PretrainConfig(objective="electra")) == []
    (fsdp,) = model_pretrain_problems(model, PretrainConfig(objective="electra", parallelism="fsdp"))
    assert fsdp.startswith("model.electra.two_stage is not supported with pretrain.parallelism fsdp")
    (accumulation,) = model_pretrain_problems(model, PretrainConfig(objective="electra", batch_size=8,
                                                                    grad_accumulation=2))
    assert accumulation.startswith("pretrain.grad_accumulation > 1 is not supported with model.electra.two_stage")
    # joint ELECTRA (one shared embedding block) has neither limit
    assert model_pretrain_problems(ModelConfig(electra={}), PretrainConfig(objective="electra", parallelism="fsdp",
                                                                           batch_size=8, grad_accumulation=2)) == []


def test_recipe_refuses_the_combination_at_load_time_naming_the_keys():
    assert load_recipe(LOCAL, ["pretrain.objective=mlm", "pretrain.unpad=true"]).pretrain.unpad
    with pytest.raises(ConfigError, match=r"(?s)local.yaml with overrides .*pretrain.unpad is only implemented for "
                                          r"BertForPreTraining.*objective plm trains XLNet"):
        load_recipe(LOCAL, ["pretrain.objective=plm", "pretrain.unpad=true"])
    with pytest.raises(ConfigError, match="model.electra.two_stage is not supported with pretrain.parallelism fsdp"):
        load_recipe(LOCAL, ["pretrain.objective=electra", "pretrain.parallelism=fsdp", "model.electra.two_stage=true",
                            "model.electra.generator_size=1.0", "model.electra.generator_steps=2"])


def test_length_buckets_and_batch_ramp_are_refused_by_the_pretrain_section():
    ramp = {"start_batch_size": 8, "steps": 10}
    assert PretrainConfig(batch_size=16, max_steps=20, batch_size_ramp=ramp).batch_size_ramp.steps == 10
    with pytest.raises(ValueError, match="pretrain.length_buckets and pretrain.batch_size_ramp cannot be combined"):
        PretrainConfig(batch_size=16, max_steps=20, batch_size_ramp=ramp, length_buckets=[16, 32])


def test_trainer_settings_are_frozen_and_validated(tmp_path):
    settings = TrainerSettings(max_steps=10, metrics_path=tmp_path / "metrics.jsonl")
    assert (settings.log_every, settings.grad_accumulation, settings.static_width) == (100, 1, None)
    with pytest.raises(AttributeError):
        settings.max_steps = 11
    with pytest.raises(ValueError, match="TrainerSettings.max_steps must be >= 1"):
        TrainerSettings(max_steps=0, metrics_path=tmp_path / "m.jsonl")
    with pytest.raises(ValueError, match="TrainerSettings.max_grad_norm must be > 0"):
        TrainerSettings(max_steps=1, metrics_path=tmp_path / "m.jsonl", max_grad_norm=0.0)


def test_a_members_settings_under_another_members_objective_are_refused_naming_both():
    # model.electra with the default objective trained BERT and never read the section, without a word
    with pytest.raises(ConfigError, match=r"model.electra is set, but pretrain.objective mlm_nsp trains BERT, which "
                                          r"does not read it: set pretrain.objective to ELECTRA's \(electra\), or drop "
                                          r"model.electra"):
        load_recipe(LOCAL, ["model.electra={generator_size: 0.5}"])
    with pytest.raises(ConfigError, match=r"model.xlnet is set, but pretrain.objective electra trains ELECTRA, .*"
                                          r"XLNet's \(plm\)"):
        load_recipe(LOCAL, ["pretrain.objective=electra", "model.xlnet.mem_len=8"])
    assert load_recipe(LOCAL, ["pretrain.objective=electra", "model.electra.generator_size=0.5"]).model.electra
    assert load_recipe(LOCAL, ["model.electra=null"]).model.electra is None
