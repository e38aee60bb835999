"""`evaluate.crosslingual` (zero-shot transfer to another language's file) and `evaluate.compare_checkpoints` (other
model directories fine-tuned with the same settings) through the evaluate stage, their results.json keys and report
tables, the CLI options that set them, and the refusals.

No labelled non-English data with a shared label set exists among the samples (../shared/data/README.md), so the
"other language" here is a file the test writes: the source task's own test examples in another column layout.
That makes the expected zero-shot score exact — each fine-tuned run must score the target exactly as it scored
the source test split."""

import argparse
import csv
import shutil

import pytest
import torch

from bertfactory.errors import ConfigError, InputError
from bertfactory.io import sha256_file
from evaluation.config import CrosslingualTarget, EvaluateConfig
from evaluation.crosslingual import load_target
from evaluation.finetune import limit_examples
from evaluation.report import truncation_note
from evaluation.results import read_results
from evaluation.run import checkpoint_labels, load_task, run_evaluate
from flows.evaluate_cli import add_evaluate_parser, transfer_overrides
from training.checkpoint import save_pretrained
from training.models.bert.model import BertConfig, BertForPreTraining

FINETUNE = {"epochs": 1, "learning_rate": 1e-3, "batch_size": 32, "max_seq_len": 32, "seed": 3, "num_seeds": 2,
            "max_train_examples": 80, "max_eval_examples": 40}


@pytest.fixture
def run_dir(eval_run, tmp_path):
    return shutil.copytree(eval_run, tmp_path / "run")


def other_checkpoint(directory, make_tokenizer, tmp_path):
    """A second, smaller model with its own tokenizer (another vocabulary), saved as a model directory."""
    tokenizer = make_tokenizer(tmp_path / "other_tokenizer.json", 800, 400)
    from tokenizers import Tokenizer

    torch.manual_seed(1)
    config = BertConfig(vocab_size=Tokenizer.from_file(str(tokenizer)).get_vocab_size(), hidden_size=16, num_layers=1,
                        num_heads=2, intermediate_size=32, max_position_embeddings=48)
    save_pretrained(BertForPreTraining(config), config, tokenizer, directory)
    return directory


def write_target(path, examples, label_names):
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE, escapechar="\\")
        writer.writerow(["satz", "etikett"])
        for e in examples:
            writer.writerow([e.text.replace("\t", " "), label_names[e.label]])
    return path


def test_zero_shot_targets_and_compared_checkpoint_through_the_stage(run_dir, task_slice, make_tokenizer, tmp_path):
    task_file = task_slice(tmp_path / "reviews.txt", 400)
    other = other_checkpoint(tmp_path / "models" / "other", make_tokenizer, tmp_path)
    base = EvaluateConfig.model_validate({"device": "cpu", "intrinsic": {"enabled": False}, "finetune": FINETUNE,
                                          "tasks": {"movie_sentiment": {"input": str(task_file)}},
                                          "baselines": ["majority"]})
    source = limit_examples(load_task("movie_sentiment", base.tasks["movie_sentiment"]), base.finetune)
    target = write_target(tmp_path / "target.tsv", source.test, source.label_names)
    cfg = EvaluateConfig.model_validate({
        **base.model_dump(), "compare_checkpoints": [str(other)],
        "crosslingual": [{"task": "movie_sentiment", "input": str(target), "language": "xx", "text_column": "satz",
                          "label_column": "etikett"}]})
    results = run_evaluate(cfg, run_dir)
    assert read_results(run_dir / "eval") == results and results["schema_version"] == 5

    info = results["compared_checkpoints"]["other"]
    assert info["tokenizer_sha256"] == sha256_file(other / "tokenizer.json") != results["checkpoint"]["tokenizer_sha256"]
    assert info["model"]["hidden_size"] == 16 and info["path"] == str(other.resolve())
    task = results["tasks"]["movie_sentiment"]
    theirs = task["compared"]["other"]
    assert [r["seed"] for r in theirs["runs"]] == [3, 4] and set(theirs["truncated"]) == {"train", "dev", "test"}
    assert theirs["accuracy"] == pytest.approx(sum(r["test"]["accuracy"] for r in theirs["runs"]) / 2)
    assert (run_dir / "cache" / "tasks" / "movie_sentiment" / "features.npz").is_file()
    assert (run_dir / "cache" / f"tasks-{info['tokenizer_sha256'][:16]}" / "movie_sentiment" / "features.npz").is_file()

    transfer = results["crosslingual"]["movie_sentiment"]
    assert transfer["source_language"] == "en" and transfer["primary_metric"] == "accuracy"
    xx = transfer["targets"]["xx"]
    assert xx["language"] == "xx" and xx["data"]["examples"] == len(source.test) == task["data"]["sizes"]["test"]
    assert xx["data"]["source_sha256"] == sha256_file(target)
    # the target holds the source's test examples: every run scores them exactly as its own test split
    for model, scores in (("pretrained", task["pretrained"]), ("random_init", task["random_init"]),
                          ("other", theirs)):
        zero_shot = xx["compared"]["other"] if model == "other" else xx[model]
        assert zero_shot["learning_rate"] == scores["learning_rate"]
        assert [r["seed"] for r in zero_shot["runs"]] == [r["seed"] for r in scores["runs"]]
        for mine, own in zip(zero_shot["runs"], scores["runs"]):
            assert mine["test"]["accuracy"] == pytest.approx(own["test"]["accuracy"])
        assert zero_shot["accuracy"] == pytest.approx(scores["accuracy"])

    report = (run_dir / "eval" / "report.md").read_text(encoding="utf-8")
    assert "Compared checkpoints" in report and "- `other`:" in report
    assert f"| checkpoint `other` | {theirs['accuracy']:.4f} ± {theirs['accuracy_std']:.4f} |" in report
    assert "## Zero-shot cross-lingual transfer from movie_sentiment (en)" in report
    p = xx["pretrained"]
    assert f"| xx | xx | {len(source.test)} | {p['accuracy']:.4f} ± {p['accuracy_std']:.4f} |" in report
    assert "truncation: inputs cut at the 32-token limit" in report or "truncation: no input longer than" in report
    assert "{'train'" not in report  # no raw dicts


def test_target_labels_must_be_the_source_label_set(tmp_path):
    from tests.evaluation.test_finetune import rule_task

    source = rule_task("classification", 120)  # labels no / yes
    path = tmp_path / "de.tsv"
    path.write_text("text\tlabel\n" + "".join(f"satz {i}\t{'ja' if i == 7 else 'no'}\n" for i in range(40)))
    with pytest.raises(InputError, match=rf"{path}:9.*'ja'"):
        load_target(CrosslingualTarget(task="has_the", input=str(path), language="de"), source)
    path.write_text("text\tlabel\n" + "".join(f"satz {i}\t{'yes' if i % 3 else 'no'}\n" for i in range(40)))
    target = load_target(CrosslingualTarget(task="has_the", input=str(path), language="de", name="de-web"), source)
    assert len(target.test) == 40 and not target.train and not target.dev and target.language == "de"
    assert target.label_names == source.label_names and target.name == "has_the:de-web"


def test_config_refusals():
    tasks = {"movie_sentiment": {}}
    with pytest.raises(ValueError, match=r"crosslingual\[0\].task 'trec_coarse' is not an enabled task"):
        EvaluateConfig.model_validate({"tasks": tasks, "crosslingual": [
            {"task": "trec_coarse", "input": "x.tsv", "language": "de"}]})
    with pytest.raises(ValueError, match=r"crosslingual\[1\]: task 'movie_sentiment' already has a target named 'de'"):
        EvaluateConfig.model_validate({"tasks": tasks, "crosslingual": [
            {"task": "movie_sentiment", "input": "a.tsv", "language": "de"},
            {"task": "movie_sentiment", "input": "b.tsv", "language": "de"}]})


def test_compare_path_that_is_no_model_directory_is_refused(run_dir, tmp_path):
    cfg = EvaluateConfig.model_validate({"device": "cpu", "intrinsic": {"enabled": False}, "finetune": FINETUNE,
                                         "compare_checkpoints": [str(tmp_path / "nowhere")], "tasks": {}})
    with pytest.raises(ConfigError, match=r"evaluate.compare_checkpoints\[0\]: .*nowhere is not a model directory"):
        run_evaluate(cfg, run_dir)


def test_checkpoint_labels_are_short_and_unique(tmp_path):
    paths = [tmp_path / "minilm", tmp_path / "a" / "pretrain" / "final", tmp_path / "b" / "pretrain" / "final"]
    assert checkpoint_labels(paths) == ["minilm", "a/pretrain/final", "b/pretrain/final"]
    assert checkpoint_labels([tmp_path / "x" / "final"]) == ["x/final"]


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_evaluate_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["evaluate", "runs/local", *argv])


def test_cli_options_become_overrides(tmp_path):
    args = parse("--task", "movie_sentiment", "--transfer-file", "de.tsv", "--transfer-language", "de",
                 "--transfer-file", "fr.tsv", "--transfer-language", "fr", "--transfer-text-column", "satz",
                 "--compare-checkpoint", str(tmp_path / "minilm"))
    crosslingual, compare = transfer_overrides(args)
    assert crosslingual.startswith("evaluate.crosslingual=[") and '"language": "fr"' in crosslingual
    assert '"task": "movie_sentiment"' in crosslingual and '"text_column": "satz"' in crosslingual
    assert compare == f'evaluate.compare_checkpoints=["{tmp_path / "minilm"}"]'
    from bertfactory.config import apply_overrides

    cfg = EvaluateConfig.model_validate(apply_overrides({"tasks": {"movie_sentiment": {}}},
                                                        [o.replace("evaluate.", "", 1) for o in (crosslingual, compare)]))
    assert [t.key for t in cfg.crosslingual] == ["de", "fr"] and cfg.crosslingual[1].input.endswith("fr.tsv")
    with pytest.raises(ConfigError, match="2 --transfer-file but 1 --transfer-language"):
        transfer_overrides(parse("--task", "t", "--transfer-file", "a", "--transfer-file", "b",
                                 "--transfer-language", "de"))
    with pytest.raises(ConfigError, match="needs --transfer-task NAME"):
        transfer_overrides(parse("--task", "a", "--task", "b", "--transfer-file", "x", "--transfer-language", "de"))
    assert transfer_overrides(parse()) == []


def test_truncation_is_said_in_words():
    per = {"task_type": "classification", "data": {"sizes": {"train": 800, "dev": 400, "test": 400},
                                                   "truncated": {"train": 12, "dev": 3, "test": 0}}}
    assert truncation_note(per, 64) == "inputs cut at the 64-token limit: train 12 of 800, dev 3 of 400, test 0 of 400"
    tagging = {**per, "task_type": "tagging"}
    assert truncation_note(tagging, 64) == ("words beyond the 64-token limit (tagged O, still scored): train 12, "
                                            "dev 3, test 0")
    per["data"]["truncated"] = {"train": 0, "dev": 0, "test": 0}
    assert truncation_note(per, 128) == "no input longer than the 128-token limit"
    assert "windows" in truncation_note({**per, "task_type": "squad"}, 384)


def test_results_v3_parts_validate(tmp_path):
    from bertfactory.errors import ContractError
    from evaluation.results import write_results
    from tests.evaluation.test_results import example, scores

    doc = example()
    doc["schema_version"] = 3
    doc["compared_checkpoints"] = {"minilm": {**doc["checkpoint"], "path": "/models/minilm"}}
    doc["tasks"]["movie_sentiment"]["compared"] = {"minilm": {**scores(0.85), "truncated": {"train": 1, "dev": 0, "test": 0}}}
    zero_shot = {"accuracy": 0.7, "accuracy_std": 0.0, "learning_rate": 2e-5,
                 "runs": [{"seed": 1, "test": {"accuracy": 0.7}}]}
    doc["crosslingual"] = {"movie_sentiment": {
        "task_type": "classification", "primary_metric": "accuracy", "source_language": "en",
        "targets": {"de": {"language": "de", "data": {"source_path": "de.tsv", "source_sha256": "ab" * 32, "lines": 41,
                                                      "examples": 40, "dropped": {}, "truncated": 0},
                           "pretrained": zero_shot, "compared": {"minilm": zero_shot}}}}}
    written = write_results(tmp_path / "results.json", doc)
    assert read_results(tmp_path / "results.json") == written
    assert written["crosslingual"]["movie_sentiment"]["targets"]["de"]["compared"]["minilm"]["accuracy"] == 0.7
    v2 = example()  # files of schema v2 are still read
    write_results(tmp_path / "v2.json", v2)
    assert read_results(tmp_path / "v2.json")["schema_version"] == 2

    unknown = {**doc, "compared_checkpoints": {}}
    with pytest.raises(ContractError, match=r"tasks.movie_sentiment.compared: minilm not in compared_checkpoints"):
        write_results(tmp_path / "bad.json", unknown)
    wrong = {**doc, "crosslingual": {"movie_sentiment": {**doc["crosslingual"]["movie_sentiment"], "targets": {
        "de": {**doc["crosslingual"]["movie_sentiment"]["targets"]["de"],
               "pretrained": {**zero_shot, "pearson": 0.5}}}}}}
    with pytest.raises(ContractError, match=r"targets.de.pretrained: pearson not metrics of classification"):
        write_results(tmp_path / "bad.json", wrong)


def test_a_small_target_file_is_read_whole_whatever_its_hashes(tmp_path):
    """Was: the target file went through the 80/10/10 split of a task file and then was put together again, so a
    split left empty refused it: `de.tsv: too few examples to fill every split (train 14, dev 0, test 6); dev is
    empty` for one 20-sentence file in five (and always for a SQuAD target of one article), although a target has no
    splits."""
    from tests.evaluation.test_finetune import rule_task

    source = rule_task("classification", 120)
    path = tmp_path / "de.tsv"
    for trial in range(12):  # 20 sentences: several of these files leave a dev or test bucket empty
        path.write_text("text\tlabel\n" + "".join(f"Satz {trial}-{i}\t{('no', 'yes')[i % 2]}\n" for i in range(20)))
        target = load_target(CrosslingualTarget(task="has_the", input=str(path), language="de"), source)
        assert len(target.test) == 20 and not target.train and not target.dev
        assert target.split_method == "every example is a test example (not split)"
    path.write_text("text\tlabel\n" + "".join(f"Satz {i}\t{('no', 'yes')[i % 2]}\n" for i in range(3)))
    assert len(load_target(CrosslingualTarget(task="has_the", input=str(path), language="de"), source).test) == 3
    path.write_text("text\tlabel\nSatz\t\n")  # no labelled example at all
    with pytest.raises(InputError, match=rf"{path}: no examples"):
        load_target(CrosslingualTarget(task="has_the", input=str(path), language="de"), source)
