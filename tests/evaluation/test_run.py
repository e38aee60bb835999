"""The evaluation stage end to end on a tiny run directory: results.json (valid, complete, reproducible apart from
timings), report.md and the plots; built-in tasks by name next to user task files; refusals for a mismatched
tokenizer (shards and task cache) and impossible settings."""

import json
import shutil

import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import sha256_file
from evaluation.config import EvaluateConfig, FeatureBasedConfig
from evaluation.report import FINETUNE_PLOT, PRETRAIN_PLOT, SCORES_PLOT, read_pretrain_metrics
from evaluation.results import read_results
from evaluation.run import run_evaluate
from training.checkpoint import load_pretrained, save_pretrained


@pytest.fixture
def run_dir(eval_run, tmp_path):
    return shutil.copytree(eval_run, tmp_path / "run")


def config(task_file, tasks=None, **finetune) -> EvaluateConfig:
    return EvaluateConfig.model_validate({
        "device": "cpu",
        "intrinsic": {"batch_size": 32},
        "finetune": {"epochs": 2, "learning_rate": 1e-3, "batch_size": 32, "max_seq_len": 32, "seed": 3,
                     "num_seeds": 2, **finetune},
        "tasks": tasks or {"movie_sentiment": {"input": str(task_file)}},
    })


def test_evaluate_writes_results_report_and_plots(run_dir, task_slice, tmp_path):
    task_file = task_slice(tmp_path / "reviews.txt", 400)
    results = run_evaluate(config(task_file), run_dir)
    eval_dir = run_dir / "eval"
    assert read_results(eval_dir / "results.json") == results

    ck = results["checkpoint"]
    assert ck["path"] == "pretrain/final"
    assert ck["model_sha256"] == sha256_file(run_dir / "pretrain/final/model.safetensors")
    assert ck["tokenizer_sha256"] == sha256_file(run_dir / "pretrain/final/tokenizer.json")
    assert results["intrinsic"]["instances"] == 96
    assert 0 <= results["intrinsic"]["mlm_accuracy"] <= 1 and 0 <= results["intrinsic"]["nsp_accuracy"] <= 1

    task = results["tasks"]["movie_sentiment"]
    assert task["task_type"] == "classification" and task["primary_metric"] == "accuracy"
    lines = task_file.read_text(encoding="utf-8").splitlines()
    zero = sum(float(line.split("\t")[1]) == 0.0 for line in lines)
    assert zero >= 1  # the slice holds a zero-valence line, so the count below is tested
    assert task["data"]["dropped"] == {"zero_valence": zero}
    assert sum(task["data"]["sizes"].values()) + zero == len(lines) == task["data"]["lines"]
    for split in ("train", "dev", "test"):
        assert sum(task["data"]["label_counts"][split].values()) == task["data"]["sizes"][split]
    # majority: the larger train class, scored on test
    train_counts = task["data"]["label_counts"]["train"]
    test_counts = task["data"]["label_counts"]["test"]
    majority = max(sorted(train_counts), key=lambda name: train_counts[name])
    assert task["majority"]["details"]["label_name"] == majority
    assert task["majority"]["accuracy"] == test_counts[majority] / task["data"]["sizes"]["test"]
    assert 0.0 <= task["tfidf_logreg"]["accuracy"] <= 1.0 and task["tfidf_logreg"]["details"]["model"] == "LogisticRegression"
    for model in ("pretrained", "random_init"):
        scores = task[model]
        assert scores["seeds"] == [3, 4] and [r["seed"] for r in scores["runs"]] == [3, 4]
        accs = [r["test"]["accuracy"] for r in scores["runs"]]
        assert scores["accuracy"] == pytest.approx(sum(accs) / 2)
        assert scores["accuracy_std"] == pytest.approx(abs(accs[0] - accs[1]) / 2 ** 0.5)
        for run in scores["runs"]:
            assert [e["epoch"] for e in run["epochs"]] == [1, 2]
            assert run["steps"] == 2 * -(-task["data"]["sizes"]["train"] // 32)
            low, high = run["accuracy_ci95"]
            assert low <= run["test"]["accuracy"] <= high
        assert sum(map(sum, scores["confusion_matrix"])) == 2 * task["data"]["sizes"]["test"]
    cmp = task["comparison"]
    assert cmp["difference"] == pytest.approx(task["pretrained"]["accuracy"] - task["random_init"]["accuracy"])
    first = [r["test"]["accuracy"] for r in (task["pretrained"]["runs"][0], task["random_init"]["runs"][0])]
    # the discordant counts (seed 3's runs) are what separates those two runs' accuracies
    assert (cmp["pretrained_only_correct"] - cmp["random_init_only_correct"]) == round(
        (first[0] - first[1]) * task["data"]["sizes"]["test"])
    assert 0.0 < cmp["mcnemar_p_value"] <= 1.0

    report = (eval_dir / "report.md").read_text(encoding="utf-8")
    assert f"![pretraining loss]({PRETRAIN_PLOT})" in report
    assert f"![fine-tuning learning curves]({FINETUNE_PLOT})" in report
    assert f"![test scores per task]({SCORES_PLOT})" in report
    assert "![confusion matrix movie_sentiment](confusion_movie_sentiment.png)" in report
    p = task["pretrained"]
    assert f"| pretrained | {p['accuracy']:.4f} ± {p['accuracy_std']:.4f} |" in report or \
        f"| pretrained | {p['accuracy']:.4f} |" in report
    assert f"| majority | {task['majority']['accuracy']:.4f} |" in report
    assert f"| MLM accuracy | {results['intrinsic']['mlm_accuracy']:.4f}" in report
    for plot in (PRETRAIN_PLOT, FINETUNE_PLOT, SCORES_PLOT, "confusion_movie_sentiment.png"):
        assert (eval_dir / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run_dir / "cache" / "tasks" / "movie_sentiment" / "features.npz").is_file()

    # a rerun gives the same results apart from wall-clock timings
    again = run_evaluate(config(task_file), run_dir)
    assert {k: v for k, v in again.items() if k != "timings"} == {k: v for k, v in results.items() if k != "timings"}


def test_options_switch_parts_off_and_missing_metrics_are_noted(run_dir, task_slice, tmp_path):
    (run_dir / "pretrain" / "metrics.jsonl").unlink()
    cfg = config(task_slice(tmp_path / "reviews.txt", 300), max_train_examples=50, epochs=1, num_seeds=1)
    cfg = cfg.model_copy(update={"random_init_baseline": False, "num_threads": 2, "baselines": [],
                                 "cache_encodings": False, "save_best": True,
                                 "intrinsic": cfg.intrinsic.model_copy(update={"enabled": False})})
    threads = torch.get_num_threads()
    results = run_evaluate(cfg, run_dir)
    assert torch.get_num_threads() == threads  # the stage's thread setting does not leak into later stages
    assert "intrinsic" not in results
    task = results["tasks"]["movie_sentiment"]
    assert "random_init" not in task and "comparison" not in task and task["data"]["sizes"]["train"] == 50
    assert "majority" not in task and "tfidf_logreg" not in task and not (run_dir / "cache").exists()
    # save_best: the task's best run, loadable into the task model it came from
    saved = run_dir / "eval" / "finetuned" / "movie_sentiment"
    head = json.loads((saved / "head.json").read_text())
    assert head["task_type"] == "classification" and head["label_names"] == ["negative", "positive"]
    from safetensors.torch import load_file

    from evaluation.heads import TaskModel
    from training.models.bert.model import BertConfig, BertModel

    model = TaskModel(BertModel(BertConfig.from_dict(head["encoder"])), "classification", 2, 0.1)
    model.load_state_dict(load_file(str(saved / "model.safetensors")))
    report = (run_dir / "eval" / "report.md").read_text(encoding="utf-8")
    assert "No pretraining curve" in report and not (run_dir / "eval" / PRETRAIN_PLOT).exists()


def test_checkpoint_with_another_tokenizer_is_refused(run_dir, task_slice, tmp_path, make_tokenizer):
    model, config_, _ = load_pretrained(run_dir / "pretrain" / "final")
    other = make_tokenizer(tmp_path / "other.json", 500, 300)
    save_pretrained(model, config_, other, run_dir / "pretrain" / "final")
    with pytest.raises(ContractError, match="built with tokenizer sha256"):
        run_evaluate(config(task_slice(tmp_path / "reviews.txt", 300)), run_dir)
    assert not (run_dir / "eval" / "results.json").exists()


def test_task_cache_of_another_tokenizer_is_refused_naming_both(run_dir, task_slice, tmp_path, make_tokenizer):
    cfg = config(task_slice(tmp_path / "reviews.txt", 300), max_train_examples=40, epochs=1, num_seeds=1)
    cfg = cfg.model_copy(update={"random_init_baseline": False,
                                 "intrinsic": cfg.intrinsic.model_copy(update={"enabled": False})})
    run_evaluate(cfg, run_dir)
    built_with = sha256_file(run_dir / "pretrain/final/tokenizer.json")
    model, config_, _ = load_pretrained(run_dir / "pretrain" / "final")
    other = make_tokenizer(tmp_path / "other.json", 500, 300)
    save_pretrained(model, config_, other, run_dir / "pretrain" / "final")
    with pytest.raises(ContractError, match="task cache .* was built with tokenizer sha256") as err:
        run_evaluate(cfg, run_dir)
    assert built_with in str(err.value) and sha256_file(other) in str(err.value)


def test_builtin_tasks_by_name_next_to_a_user_task_file(run_dir, tmp_path):
    tagged = tmp_path / "tagged.conll"
    places = ["paris", "rome", "berlin", "madrid", "oslo", "vienna", "prague", "lisbon"]
    words = ["film", "movie", "story", "plot", "cast", "score", "scene", "ending", "script", "actor"]
    sentences = [["the", w, "was", "set", "in", p] for p in places for w in words]
    tags = {p: "B-LOC" for p in places}
    tagged.write_text("\n\n".join("\n".join(f"{w}\t{tags.get(w, 'O')}" for w in s) for s in sentences) + "\n")
    from tests.evaluation.test_finetune import rule_task

    squad = rule_task("squad", 120)
    paragraphs = [{"context": e.context, "qas": [{"id": e.id, "question": e.question, "is_impossible": e.is_impossible,
                                                   "answers": [{"text": a.text, "answer_start": a.start} for a in e.answers]}]}
                  for e in squad.train + squad.dev + squad.test]
    squad_file = tmp_path / "squad.json"
    squad_file.write_text(json.dumps({"version": "v2.0", "data": [{"title": f"t{i}", "paragraphs": [p]}
                                                                   for i, p in enumerate(paragraphs)]}))
    choice = rule_task("multiple-choice", 600)
    choice_file = tmp_path / "choice.jsonl"
    choice_file.write_text("".join(json.dumps({"id": e.id, "question": e.question, "options": list(e.options),
                                               "label": e.label}) + "\n" for e in choice.train + choice.dev + choice.test))
    tasks = {"movie_valence": {}, "places": {"input": str(tagged), "task_type": "tagging"},
             "qa": {"input": str(squad_file), "task_type": "squad"},
             "pick": {"input": str(choice_file), "task_type": "multiple-choice"}}
    cfg = config(None, tasks=tasks, max_train_examples=60, max_eval_examples=30, epochs=1, num_seeds=1,
                 max_answer_len=4, doc_stride=8)
    cfg = cfg.model_copy(update={"intrinsic": cfg.intrinsic.model_copy(update={"enabled": False}),
                                 "feature_based": FeatureBasedConfig(enabled=True, task="places", epochs=1, lstm_hidden=8,
                                                                     options=["embeddings", "scalar_mix"])})
    results = run_evaluate(cfg, run_dir)
    qa, pick = results["tasks"]["qa"], results["tasks"]["pick"]
    assert qa["primary_metric"] == "f1" and 0.0 <= qa["pretrained"]["f1"] <= 100.0 and "tfidf_logreg" not in qa
    assert {"best_f1", "NoAns_exact", "na_threshold"} <= set(qa["pretrained"]) and qa["majority"]["NoAns_exact"] == 100.0
    assert pick["primary_metric"] == "accuracy" and "tfidf_logreg" in pick and "mcnemar_p_value" in pick["comparison"]
    fb = results["feature_based"]
    assert fb["task"] == "places" and [r["option"] for r in fb["rows"]] == ["embeddings", "scalar_mix"]
    assert "## Feature-based (frozen encoder)" in (run_dir / "eval" / "report.md").read_text()
    valence, places = results["tasks"]["movie_valence"], results["tasks"]["places"]
    assert valence["task_type"] == "regression" and valence["primary_metric"] == "pearson"
    assert valence["tfidf_logreg"]["details"]["model"] == "Ridge" and "pearson" not in valence["majority"]
    assert valence["data"]["sizes"]["train"] == 60 and valence["data"]["sizes"]["test"] == 30
    assert places["task_type"] == "tagging" and "tfidf_logreg" not in places
    assert set(places["data"]["label_names"]) == {"O", "B-LOC", "I-LOC"} and "entity_f1" in places["pretrained"]
    assert "entity_f1_std" in places["pretrained"] and places["majority"]["entity_f1"] == 0.0
    # an unknown name is refused with the config (evaluation/config.py, before any stage runs), and by load_task for
    # a TaskConfig that never went through EvaluateConfig
    from evaluation.config import TaskConfig
    from evaluation.run import load_task

    with pytest.raises(ValueError, match="evaluate.tasks.nonesuch: 'nonesuch' is not a built-in task"):
        config(None, tasks={"nonesuch": {}})
    with pytest.raises(ConfigError, match="evaluate.tasks.nonesuch: 'nonesuch' is not a built-in task"):
        load_task("nonesuch", TaskConfig())


def test_sequence_longer_than_the_model_is_refused(run_dir, task_slice, tmp_path):
    cfg = config(task_slice(tmp_path / "reviews.txt", 300), max_seq_len=65)  # the tiny model has 64 positions
    cfg = cfg.model_copy(update={"intrinsic": cfg.intrinsic.model_copy(update={"enabled": False})})
    with pytest.raises(ConfigError, match="max_seq_len=65 exceeds the checkpoint's max_position_embeddings=64"):
        run_evaluate(cfg, run_dir)


def test_missing_checkpoint_and_unknown_config_keys(tmp_path):
    with pytest.raises(ContractError, match="does not exist"):
        run_evaluate(EvaluateConfig(device="cpu"), tmp_path)
    from bertfactory.config import validate

    with pytest.raises(ConfigError, match=r"unknown key 'finetune.epoch' \(did you mean 'epochs'\?\); "
                                          r"valid keys here: .*epochs"):
        validate(EvaluateConfig, {"finetune": {"epoch": 3}}, "test.yaml")


def test_malformed_metrics_line_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n" + "{oops\n")
    with pytest.raises(ContractError, match=f"{path}:2: not a JSON object"):
        read_pretrain_metrics(path)
    path.write_text(json.dumps({"step": "one", "loss": 2.0}) + "\n")
    with pytest.raises(ContractError, match=f"{path}:1: a metrics record needs an integer 'step'"):
        read_pretrain_metrics(path)


def test_a_hugging_face_directory_is_refused_naming_import_hf(tmp_path):
    # was: ContractError ".../hf/config.json: field 'format' is None, expected 'bertfactory.checkpoint'"
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"architectures": ["BertForPreTraining"], "model_type": "bert"}')
    cfg = EvaluateConfig.model_validate({"device": "cpu", "checkpoint": str(hf), "intrinsic": {"enabled": False},
                                         "objective": {"enabled": False}, "tasks": {}})
    with pytest.raises(ConfigError, match=r"^the checkpoint: .*/hf is a Hugging Face model directory "
                                          r"\(BertForPreTraining\), not a bertfactory checkpoint; convert it first "
                                          r"with `bertfactory import-hf .*/hf OUT`"):
        run_evaluate(cfg, tmp_path / "run")
