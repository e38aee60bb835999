"""The `bertfactory` command: help texts, and bad recipes or missing samples give one clear line (exit 2)
before any stage starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main

REPO = Path(__file__).resolve().parents[2]
LOCAL = str(REPO / "configs" / "local.yaml")


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["inspect", "--help"], ["samples", "fetch", "--help"]])
def test_help_explains_each_command(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: bertfactory" in out
    if argv == ["run", "--help"]:
        assert "--set" in out and "--run-dir" in out and "pretrain.max_steps=200" in out


def test_embedded_default_recipe_is_valid():
    from flows.recipe import load_recipe

    recipe = load_recipe(LOCAL)
    assert recipe.corpus.inputs == ["sample:enwiki"]
    assert recipe.preprocess.runner.preset == "local" and recipe.preprocess.runner.num_workers == 2
    assert recipe.model.num_layers <= 4 and recipe.pretrain.device == "auto"


def test_unknown_recipe_key_names_the_key_and_the_choices(tmp_path, capsys):
    assert main(["run", LOCAL, "--run-dir", str(tmp_path / "run"), "--set", "pretrain.max_stepz=3"]) == 2
    err = capsys.readouterr().err
    assert "pretrain.max_stepz" in err and "max_steps" in err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_unknown_key_in_a_recipe_file(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("name: bad\nmodel:\n  hidden: 64\n")
    assert main(["preprocess", str(recipe), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "model.hidden" in err and "hidden_size" in err and str(recipe) in err


def test_wrong_type_names_the_key(tmp_path, capsys):
    assert main(["run", LOCAL, "--run-dir", str(tmp_path / "run"), "--set", "pretrain.max_steps=many"]) == 2
    err = capsys.readouterr().err
    assert "pretrain.max_steps" in err and "many" in err


def test_missing_sample_says_to_fetch_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERTFACTORY_CACHE", str(tmp_path / "empty-cache"))
    assert main(["preprocess", LOCAL, "--run-dir", str(tmp_path / "run"), "--no-prefect"]) == 2
    err = capsys.readouterr().err
    assert "enwiki" in err and "bertfactory samples fetch" in err


def test_a_stage_before_its_upstream_says_what_to_run(tmp_path, capsys):
    assert main(["evaluate", LOCAL, "--run-dir", str(tmp_path / "run"), "--no-prefect"]) == 2
    err = capsys.readouterr().err
    assert "bertfactory pretrain" in err


def test_inspect_without_shards_says_to_preprocess(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    assert "bertfactory preprocess" in capsys.readouterr().err


def test_samples_list_shows_each_sample(capsys):
    assert main(["samples", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("enwiki", "movie_reviews", "minilm"):
        assert name in out


def test_describe_prints_counts_without_building_weights(capsys):
    assert main(["describe", LOCAL]) == 0
    out = capsys.readouterr().out
    assert "1,478,978" in out  # the demo model's parameters (as the demo's pretraining log reports them)
    assert "the same with MLM logits at every token" in out


def test_describe_refuses_sequences_longer_than_the_positions_in_one_line(capsys):
    assert main(["describe", LOCAL, "--set", "model.max_position_embeddings=64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: preprocess.instances.max_seq_len 128 exceeds model.max_position_embeddings=64: raise "
                   "model.max_position_embeddings to >= 128 or lower max_seq_len"), err


def test_export_to_hf_and_import_hf_round_trip(tmp_path, capsys):
    import json

    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from training.checkpoint import save_pretrained
    from training.models.bert.model import BertConfig, BertForPreTraining

    for argv in (["export", "--help"], ["import-hf", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--to {hf}" in out and "AutoModelForPreTraining" in out and "BertForMaskedLM" in out and "--seed" in out

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])}
    Tokenizer(WordLevel(vocab, unk_token="[UNK]")).save(str(tmp_path / "tokenizer.json"))
    config = BertConfig(vocab_size=7, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                        max_position_embeddings=8)
    run = tmp_path / "run"
    save_pretrained(BertForPreTraining(config), config, tmp_path / "tokenizer.json", run / "pretrain" / "final")

    assert main(["export", str(run), "--to", "hf", str(tmp_path / "hf")]) == 0  # a run dir means its pretrain/final
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    assert "(BertForPreTraining)" in capsys.readouterr().out
    before = load_file(str(run / "pretrain" / "final" / "model.safetensors"))
    after = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)

    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back")]) == 2  # no silent replacement
    assert "error: output directory" in capsys.readouterr().err
    doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**doc, "model_type": "deberta"}))
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "model_type 'deberta' cannot be imported" in err
    assert "Supported: model_type 'bert'" in err
    assert main(["export", str(tmp_path / "missing"), "--to", "hf", str(tmp_path / "x")]) == 2
    assert "missing does not exist" in capsys.readouterr().err
