"""The tapt section of a recipe (flows/tapt_config.py, flows/tapt.py) and the task corpus it writes
(evaluation/task_corpus.py): what the ordinary stages see, what a wrong recipe is told, and that only training texts
become pretraining text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertfactory.errors import ConfigError
from bertfactory.samples import is_fetched
from evaluation.config import TaskConfig
from evaluation.task_corpus import example_text, write_task_corpus
from evaluation.tasks.base import ChoiceExample, Example, SquadExample, TaggingExample
from flows.recipe import load_recipe
from flows.stages import STAGE_ORDER, recipe_stages
from flows.tapt import TASK_CORPUS, UNADAPTED, with_tapt

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tapt-minilm.yaml"


def test_the_recipe_runs_tapt_first_and_fills_in_the_stages_paths(tmp_path):
    recipe = load_recipe(RECIPE)
    assert recipe_stages(recipe) == ("tapt", *STAGE_ORDER)
    assert recipe_stages(load_recipe("configs/local.yaml")) == STAGE_ORDER
    filled = with_tapt(recipe, tmp_path / "run")
    assert filled.corpus.inputs == [str((tmp_path / "run").resolve() / TASK_CORPUS)]
    assert filled.pretrain.init_from.endswith("minilm") and filled.preprocess.tokenizer.path.endswith("tokenizer.json")
    assert filled.evaluate.compare_checkpoints == [UNADAPTED]
    assert with_tapt(filled, tmp_path / "run") == filled  # idempotent: every stage may apply it
    kept = load_recipe(RECIPE, ["preprocess.tokenizer.path=/models/minilm/vocab.txt"])
    assert with_tapt(kept, tmp_path).preprocess.tokenizer.path == "/models/minilm/vocab.txt"


@pytest.mark.parametrize("overrides, expected", [
    (["corpus.inputs=[sample:enwiki]"], "corpus.inputs must list 'tapt:tasks'"),
    (["corpus.format=text"], "corpus.format must be jsonl"),
    (["pretrain.init_from=/somewhere"], "leave pretrain.init_from null"),
    (["pretrain.objective=mlm_sop", "preprocess.instances.format=sop-pairs"],
     "pretrain.objective must be one of mlm, mlm_nsp"),
    (["tapt.tasks=[wnut16]"], "tapt.tasks wnut16 not among the enabled evaluate.tasks (movie_sentiment, trec_coarse)"),
    (["tapt.tasks=[trec_corse]"], "tapt.tasks trec_corse not among the enabled evaluate.tasks (movie_sentiment, "
                                  "trec_coarse); did you mean 'trec_coarse'?"),
    (["tapt.hf_modle=x"], "hf_modle"),
])
def test_a_wrong_tapt_recipe_is_refused_when_it_loads(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_recipe(RECIPE, overrides)
    assert expected in str(err.value)


def test_the_task_corpus_placeholder_needs_a_tapt_section():
    with pytest.raises(ConfigError, match="'tapt:tasks', which only a `tapt` section provides"):
        load_recipe("configs/local.yaml", ["corpus.inputs=[tapt:tasks]"])


def test_each_task_type_contributes_its_unlabeled_text():
    assert example_text(Example("1", "a film", 1, text_b="a movie")) == "a film\na movie"
    assert example_text(TaggingExample("1", ("New", "York"), (1, 2))) == "New York"
    assert example_text(SquadExample("1", "Where?", "In Paris.", ())) == "In Paris.\nWhere?"
    assert example_text(ChoiceExample("1", "", "Which?", ("a", "b"), 0)) == "Which?\na\nb"


@pytest.mark.skipif(not (is_fetched("trec") and is_fetched("movie_reviews")),
                    reason="needs `bertfactory samples fetch trec movie_reviews`")
def test_the_task_corpus_holds_the_training_texts_only(tmp_path):
    from evaluation.run import load_task

    tasks = {"trec_coarse": TaskConfig(), "movie_sentiment": TaskConfig()}
    out = tmp_path / "corpus.jsonl"
    summary = write_task_corpus(tasks, out)
    docs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for name in tasks:
        data = load_task(name, tasks[name])
        own = [d for d in docs if d["id"].startswith(f"{name}/")]
        assert [d["id"] for d in own] == [f"{name}/{e.id}" for e in data.train]  # the train split, in its order
        assert [d["text"] for d in own] == [e.text for e in data.train] and summary[name]["documents"] == len(own)
        # no test sentence is pretrained on (the movie file repeats one sentence under two ids, one in dev)
        assert not {e.text for e in data.test} & {d["text"] for d in own}
    assert {d["lang"] for d in docs} == {"en"} and "label" not in docs[0]
    again = tmp_path / "again.jsonl"
    write_task_corpus(tasks, again)
    assert again.read_bytes() == out.read_bytes()  # deterministic
    with pytest.raises(ConfigError, match="no task"):
        write_task_corpus({}, tmp_path / "none.jsonl")


def test_a_stage_of_a_tapt_recipe_run_alone_says_what_writes_its_input(tmp_path, capsys):
    from flows.cli import main

    for stage in ("preprocess", "evaluate"):
        assert main([stage, str(RECIPE), "--run-dir", str(tmp_path / "run"), "--no-prefect"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and f"{stage} of a tapt recipe needs" in err
        assert "which the tapt stage writes; run `bertfactory run`" in err and err.count("\n") == 1


def test_head_warmup_and_epochs_set_the_pretrain_steps_once_the_shards_exist(tmp_path):
    run = tmp_path / "run"
    recipe = load_recipe(RECIPE, ["tapt.head_warmup_steps=200", "tapt.epochs=10"])  # above the recipe's 60 steps
    before = with_tapt(recipe, run)  # no shards yet: max_steps as the recipe says (no stage before pretrain reads it)
    assert before.pretrain.freeze_encoder_steps == 200 and before.pretrain.max_steps == 60
    (run / "shards").mkdir(parents=True)
    (run / "shards" / "manifest.json").write_text(json.dumps({"splits": {"train": {"rows": 2228}}}))
    filled = with_tapt(recipe, run)
    # 2,228 rows // 32 = 69 steps an epoch: the warm-up, then 10 epochs of the whole model
    assert filled.pretrain.freeze_encoder_steps == 200 and filled.pretrain.max_steps == 200 + 690
    assert with_tapt(filled, run) == filled
    plain = with_tapt(load_recipe(RECIPE), run)
    assert plain.pretrain.freeze_encoder_steps == 0 and plain.pretrain.max_steps == 60
    assert with_tapt(load_recipe(RECIPE, ["tapt.epochs=0.5"]), run).pretrain.max_steps == 35  # ceil(34.5)
    with pytest.raises(ConfigError, match=r"^tapt: pretrain.freeze_encoder_steps is not implemented with parallelism fsdp"):
        with_tapt(load_recipe(RECIPE, ["tapt.head_warmup_steps=10", "tapt.epochs=1", "pretrain.parallelism=fsdp"]), run)
    with pytest.raises(ConfigError, match="2228 train rows .* fewer than pretrain.batch_size \\(4096\\)"):
        with_tapt(load_recipe(RECIPE, ["tapt.epochs=1", "pretrain.batch_size=4096"]), run)


@pytest.mark.parametrize("overrides, expected", [
    (["tapt.head_warmup_steps=60"], "tapt.head_warmup_steps (60) must be < pretrain.max_steps (60), or set tapt.epochs"),
    (["tapt.head_warmup_steps=5", "pretrain.freeze_encoder_steps=5"], "set the head warm-up in one place"),
    (["tapt.epochs=0"], "tapt.epochs"),
])
def test_a_wrong_warmup_or_epochs_is_refused_when_the_recipe_loads(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_recipe(RECIPE, overrides)
    assert expected in str(err.value)
