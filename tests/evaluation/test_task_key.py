"""A task's key (evaluation.run.task_key) depends on what its files hold, never on where they lie: the same task data
in another samples cache or another checkout (an evaluation on object storage continued on another machine) gives
the same key, so its finished parts and runs are reused; other content, or a file of another name, gives another."""

import shutil
from pathlib import Path

import pytest
import torch

import evaluation.finetune as finetune
from evaluation.config import EvaluateConfig
from evaluation.run import Checkpoint, run_evaluate, task_key
from tests.evaluation.conftest import write_task_slice

CPU = torch.device("cpu")
MAIN = Checkpoint("pretrained", Path("unused"), None, None, {"model_sha256": "m" * 64, "tokenizer_sha256": "t" * 64})
UCI = {"imdb.json": '[{"text": "a fine film", "class": 1}]', "yelp.json": '[{"text": "cold soup", "class": 0}]',
       "amazon.json": '[{"text": "works well", "class": 1}]'}


def key(tasks: dict, name: str, **more) -> str:
    cfg = EvaluateConfig.model_validate({"device": "cpu", "tasks": tasks, **more})
    return task_key(name, cfg.tasks[name], cfg, MAIN, [], CPU)


def samples_cache(root: Path, files: dict[str, str]) -> Path:
    """A samples cache at `root` holding the uci_sentences sample (a directory of files) with `files`."""
    sample = root / "samples" / "uci_sentences"
    sample.mkdir(parents=True)
    for name, text in files.items():
        (sample / name).write_text(text)
    return root


def test_a_task_file_in_two_places_has_one_key(tmp_path):
    (tmp_path / "a").mkdir()
    first = tmp_path / "a" / "reviews.txt"
    first.write_text("1\t1.5\ta fine film\n2\t-2.0\ta dull plot\n")
    second = tmp_path / "elsewhere" / "checkout" / "reviews.txt"
    second.parent.mkdir(parents=True)
    shutil.copy(first, second)
    # absolute paths, as `bertfactory evaluate --task-file` writes them into the settings
    same = key({"movie_sentiment": {"input": str(first)}}, "movie_sentiment")
    assert key({"movie_sentiment": {"input": str(second)}}, "movie_sentiment") == same

    second.write_text("1\t1.5\ta fine film\n2\t2.0\ta dull plot\n")  # other content
    assert key({"movie_sentiment": {"input": str(second)}}, "movie_sentiment") != same
    renamed = first.rename(first.with_suffix(".tsv"))  # the name is read too: a table's layout is its extension
    assert key({"movie_sentiment": {"input": str(renamed)}}, "movie_sentiment") != same
    # which setting a file fills is part of the key: the same files as other splits are another task
    dev = tmp_path / "a" / "dev.tsv"
    dev.write_text("text\tlabel\nok\tpos\n")
    user = {"task_type": "classification", "text_column": "text", "label_column": "label"}
    as_dev = key({"mine": {"input": str(renamed), "dev_input": str(dev), **user}}, "mine")
    assert key({"mine": {"input": str(renamed), "test_input": str(dev), **user}}, "mine") != as_dev


def test_a_crosslingual_target_in_two_places_has_one_key(tmp_path):
    source = tmp_path / "reviews.txt"
    source.write_text("1\t1.5\ta fine film\n")
    targets = []
    for place in ("a", "b"):
        target = tmp_path / place / "de.tsv"
        target.parent.mkdir()
        target.write_text("text\tlabel\nein guter Film\tpositive\n")
        targets.append(target)
    keys = [key({"movie_sentiment": {"input": str(source)}}, "movie_sentiment",
                crosslingual=[{"task": "movie_sentiment", "input": str(t), "language": "de"}]) for t in targets]
    assert keys[0] == keys[1]
    targets[1].write_text("text\tlabel\nein guter Film\tnegative\n")
    assert key({"movie_sentiment": {"input": str(source)}}, "movie_sentiment",
               crosslingual=[{"task": "movie_sentiment", "input": str(targets[1]), "language": "de"}]) != keys[0]


def test_a_builtin_sample_in_another_cache_has_the_same_key(tmp_path, monkeypatch):
    keys = {}
    for place, files in (("a", UCI), ("b/deeper", UCI), ("c", {**UCI, "yelp.json": '[{"text": "hot", "class": 1}]'})):
        monkeypatch.setenv("BERTFACTORY_CACHE", str(samples_cache(tmp_path / place, files)))
        keys[place] = key({"uci_sentences": {}}, "uci_sentences")
        # the same sample named by `sample:`: the same files, the same key
        assert key({"uci_sentences": {"input": "sample:uci_sentences"}}, "uci_sentences") == keys[place]
    assert keys["a"] == keys["b/deeper"]  # the cache moved: the same key
    assert keys["c"] != keys["a"]  # one file of the sample changed: another key


def test_an_evaluation_with_its_samples_cache_moved_reuses_the_task(eval_run, tmp_path, monkeypatch):
    """The whole evaluation, twice: the second on a 'machine' whose samples cache lies elsewhere (the first cache
    gone) fine-tunes nothing, and its results are the first's."""
    first = tmp_path / "first-machine"
    write_task_slice(first / "samples" / "movie_reviews" / "movieReviewSnippets_GroundTruth.txt", 120)
    run_dir = shutil.copytree(eval_run, tmp_path / "run")
    cfg = EvaluateConfig.model_validate({
        "device": "cpu", "intrinsic": {"enabled": False}, "objective": {"enabled": False},
        "random_init_baseline": False, "baselines": ["majority"], "tasks": {"movie_sentiment": {}},
        "finetune": {"epochs": 1, "learning_rates": [1e-3], "num_seeds": 1, "batch_size": 32, "max_seq_len": 32,
                     "max_train_examples": 40, "max_eval_examples": 20, "seed": 3}})
    monkeypatch.setenv("BERTFACTORY_CACHE", str(first))
    before = run_evaluate(cfg, run_dir)["tasks"]["movie_sentiment"]

    second = shutil.copytree(first, tmp_path / "another" / "home" / "cache")
    shutil.rmtree(first)
    monkeypatch.setenv("BERTFACTORY_CACHE", str(second))

    def no_run(*args, **kwargs):
        raise AssertionError("a fine-tuning run although the task's data did not change")

    monkeypatch.setattr(finetune, "finetune_run", no_run)
    assert run_evaluate(cfg, run_dir)["tasks"]["movie_sentiment"] == before
    # and a changed sample is evaluated again
    sample = second / "samples" / "movie_reviews" / "movieReviewSnippets_GroundTruth.txt"
    sample.write_bytes(sample.read_bytes().split(b"\r\n", 1)[1])  # its first line gone
    with pytest.raises(AssertionError, match="a fine-tuning run"):
        run_evaluate(cfg, run_dir)
