"""The objective registry: every objective names a registered architecture, unknown names list the valid ones,
and shards built for another objective are refused naming the manifest field and the format needed."""

import json

import pytest

from bertfactory.errors import ContractError
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.models.registry import architectures
from training.objectives import get_objective_spec, objective_names
from training.pretrain import pretrain

TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)


def test_every_objective_trains_a_registered_architecture():
    assert {"mlm_nsp", "mlm"} <= set(objective_names())
    for name in objective_names():
        assert get_objective_spec(name).architecture in architectures(), name


def test_unknown_objective_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown objective 'mlm_xyz' \\(did you mean 'mlm'\\?\\); valid choices: "
                       ".*mlm_nsp"):
        PretrainConfig(objective="mlm_xyz")
    # a member's name where its objective goes (docs/family.md): the objectives that train it
    with pytest.raises(ValueError, match=r"unknown objective 'roberta' \(RoBERTa is trained by objective mlm\); "):
        PretrainConfig(objective="roberta")
    with pytest.raises(ValueError, match=r"\(XLNet is trained by objective plm\)"):
        PretrainConfig(objective="XLNet")


def test_shards_of_another_instance_format_are_refused_naming_field_and_format(run_factory):
    run = run_factory("single")
    manifest_path = run / "shards" / "manifest.json"
    doc = json.loads(manifest_path.read_text())
    doc["instance_format"]["name"] = "single-segment"
    manifest_path.write_text(json.dumps(doc))
    cfg = PretrainConfig(objective="mlm_nsp", batch_size=8, max_steps=2, warmup_steps=0, verify_shards=False)
    with pytest.raises(ContractError, match=r"'single-segment' \(field instance_format.name\).*next-sentence labels"
                                            r".*nsp-pairs"):
        pretrain(TINY, cfg, run)
    # the masked-LM-only objective trains on them
    summary = pretrain(TINY, cfg.model_copy(update={"objective": "mlm"}), run)
    assert summary["steps"] == 2
