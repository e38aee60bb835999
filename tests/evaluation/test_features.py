"""Feature-based use: the BERT paper's layer options over a frozen encoder feeding a BiLSTM tagger, side by side."""

import pytest
import torch

from evaluation.config import FeatureBasedConfig, FinetuneConfig
from evaluation.encode import TextEncoder
from evaluation.features import OPTIONS, ScalarMix, compare_options, layers_used, render_table
from evaluation.finetune import prepare_task
from tests.evaluation.test_finetune import rule_task
from training.checkpoint import load_pretrained


def test_layer_options_pick_the_papers_layers():
    assert layers_used("embeddings", 13) == [0] and layers_used("last", 13) == [12]
    assert layers_used("second_to_last", 13) == [11]
    assert layers_used("sum_last_four", 13) == layers_used("concat_last_four", 13) == [9, 10, 11, 12]
    assert layers_used("scalar_mix", 13) == list(range(13))
    assert layers_used("sum_last_four", 3) == [0, 1, 2]  # fewer than four layers: all there are
    with pytest.raises(ValueError, match="unknown feature option 'middle'"):
        layers_used("middle", 13)
    mix = ScalarMix(3)
    layers = torch.randn(3, 5, 4)
    assert torch.allclose(mix(layers), layers.mean(0), atol=1e-6)  # equal weights, gamma 1 at the start
    with torch.no_grad():
        mix.scalars[:] = torch.tensor([0.0, 0.0, 50.0])
        mix.gamma.fill_(2.0)
    assert torch.allclose(mix(layers), 2 * layers[2], atol=1e-5)


def test_side_by_side_table_on_a_tagging_task(eval_run):
    text_encoder = TextEncoder.from_file(eval_run / "pretrain" / "final" / "tokenizer.json")
    model, _, _ = load_pretrained(eval_run / "pretrain" / "final")
    encoder = model.backbone()
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    data = rule_task("tagging", 300)
    task = prepare_task(data, text_encoder, FinetuneConfig(max_seq_len=40))
    cfg = FeatureBasedConfig(enabled=True, task=data.name, epochs=4, lstm_hidden=16, learning_rate=1e-2)
    table = compare_options(encoder, task, cfg, torch.device("cpu"), text_encoder.pad_id, seed=0)
    assert all(torch.equal(before[k], v) for k, v in encoder.state_dict().items())  # frozen
    assert table["layers_available"] == 3 and [r["option"] for r in table["rows"]] == list(OPTIONS)
    rows = {r["option"]: r for r in table["rows"]}
    assert rows["concat_last_four"]["layers"] == [0, 1, 2] and rows["last"]["layers"] == [2]
    # the tagged words ("the", "a") are identifiable from the token alone: the embeddings suffice
    assert rows["embeddings"]["entity_f1"] > 0.5
    assert sum(rows["scalar_mix"]["mix_weights"]) == pytest.approx(1.0)
    for r in table["rows"]:
        assert 0.0 <= r["entity_f1"] <= 1.0 and 1 <= r["best_epoch"] <= 4
    text = render_table(table)
    assert "| first layer (embeddings) | h0 |" in text and "BiLSTM" in text
    again = compare_options(encoder, task, cfg.model_copy(update={"options": ["embeddings"]}), torch.device("cpu"),
                            text_encoder.pad_id, seed=0)
    assert again["rows"][0] == rows["embeddings"]  # deterministic under the seed
