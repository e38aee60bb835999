"""Continued pretraining after a corpus refresh (flows/continued.py, `bertfactory refresh --continue-pretraining`):
version 1 trains the base model from scratch, version 2 continues from version 1's final weights
(pretrain.init_from) on the new documents only, a refresh with nothing new does not train again; a run directory
made by the pipeline gives version 1 its tokenizer and is continued from its model; a start model of another
tokenizer is refused."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file

from bertfactory.errors import ConfigError
from bertfactory.samples import sample_path
from flows.cli import main
from flows.recipe import load_recipe
from flows.stages import run_stage

SOTU = ("1790_george_washington_n.txt", "1791_george_washington_n.txt", "1792_george_washington_n.txt",
        "1793_george_washington_n.txt")


def recipe(tiny_recipe, tmp_path, watch):
    return tiny_recipe(
        tmp_path / "recipe.yaml", [watch], name="continued-test",
        model={"hidden_size": 16, "num_layers": 1, "num_heads": 2, "intermediate_size": 32, "max_position_embeddings": 32},
        pretrain={"device": "cpu", "seed": 1, "batch_size": 2, "max_steps": 4, "warmup_steps": 1, "log_every": 1,
                  "save_every": 2, "num_threads": 1},
        refresh={"continue_steps": 3})


def test_refresh_continues_pretraining_from_the_latest_checkpoint(tmp_path, capsys, tiny_recipe):
    watch = tmp_path / "watch"
    watch.mkdir()
    for name in SOTU[:2]:
        shutil.copy(sample_path("sotu") / name, watch / name)
    config = recipe(tiny_recipe, tmp_path, watch)
    run = tmp_path / "run"
    refresh = ["refresh", str(config), "--run-dir", str(run), "--continue-pretraining", "--no-prefect"]
    assert main(refresh) == 0
    v1 = run / "continued/v1/pretrain"
    assert json.loads((v1 / "summary.json").read_text())["steps"] == 4  # the base model: the recipe's max_steps
    fingerprint = json.loads((v1 / "final/config.json").read_text())["training"]["fingerprint"]
    assert fingerprint["pretrain"]["init_from"] is None

    for name in SOTU[2:]:
        shutil.copy(sample_path("sotu") / name, watch / name)
    assert main(refresh) == 0
    out = capsys.readouterr().out
    assert "corpus version 2" in out and f"continued pretraining: {run / 'continued/v2/pretrain/final'}" in out
    v2 = run / "continued/v2/pretrain"
    assert json.loads((v2 / "summary.json").read_text())["steps"] == 3  # refresh.continue_steps
    fingerprint = json.loads((v2 / "final/config.json").read_text())["training"]["fingerprint"]
    assert fingerprint["pretrain"]["init_from"] == str((v1 / "final").resolve())
    assert (run / "continued/v2/shards").resolve() == (run / "corpora/v2").resolve()
    # trained on from v1's weights: v2's final differs from v1's, by 3 small steps
    a, b = load_file(str(v1 / "final/model.safetensors")), load_file(str(v2 / "final/model.safetensors"))
    assert a.keys() == b.keys() and any(not a[k].equal(b[k]) for k in a)

    stamp = (run / "continued/v2/.bertfactory/pretrain.json").read_bytes()
    assert main(refresh) == 0
    assert "nothing new" in capsys.readouterr().out
    assert (run / "continued/v2/.bertfactory/pretrain.json").read_bytes() == stamp
    assert not (run / "continued/v3").exists()


def test_a_pipeline_run_directory_is_continued_and_another_tokenizer_refused(tmp_path, tiny_recipe):
    watch = tmp_path / "watch"
    watch.mkdir()
    shutil.copy(sample_path("sotu") / SOTU[0], watch / SOTU[0])
    config = recipe(tiny_recipe, tmp_path, watch)
    run = tmp_path / "run"
    pipeline = load_recipe(config, ["preprocess.tokenizer.vocab_size=200"])
    for stage in ("preprocess", "pretrain"):  # what `bertfactory run` leaves (evaluation aside)
        run_stage(stage, pipeline, run)
    shutil.copy(sample_path("sotu") / SOTU[1], watch / SOTU[1])
    assert main(["refresh", str(config), "--run-dir", str(run), "--continue-pretraining", "--no-prefect"]) == 0
    # version 1 keeps the run's token ids, so it continues the run's model
    assert (run / "corpora/tokenizer/tokenizer.json").read_bytes() == (run / "tokenizer/tokenizer.json").read_bytes()
    continued = run / "continued/v1/pretrain"
    fingerprint = json.loads((continued / "final/config.json").read_text())["training"]["fingerprint"]
    assert fingerprint["pretrain"]["init_from"] == str((run / "pretrain/final").resolve())
    assert json.loads((continued / "summary.json").read_text())["steps"] == 3

    other = tmp_path / "other"
    run_stage("preprocess", load_recipe(config), other)  # a 300-token tokenizer
    start = load_recipe(config, [f"pretrain.init_from={(continued / 'final').resolve()}"])
    with pytest.raises(ConfigError, match=r"pretrain.init_from .* was trained with another tokenizer"):
        run_stage("pretrain", start, other)
