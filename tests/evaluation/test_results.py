"""results.json: a written file reads back equal, and the reader refuses other formats, unknown versions,
missing or extra keys and out-of-range values, naming the file."""

import copy
import json

import pytest

from bertfactory.errors import ContractError
from evaluation.results import read_results, write_results


def scores(acc):
    run = {"seed": 1, "best_epoch": 2, "steps": 30, "stopped_early": False, "dev": {"accuracy": 0.7},
           "test": {"accuracy": acc, "f1": 0.5}, "accuracy_ci95": [max(0.0, acc - 0.1), min(1.0, acc + 0.1)],
           "epochs": [{"epoch": 1, "train_loss": 0.69, "dev_score": 0.6, "lr_end": 1e-4},
                      {"epoch": 2, "train_loss": 0.5, "dev_score": 0.7, "lr_end": 0.0}]}
    return {"accuracy": acc, "accuracy_std": 0.0, "f1": 0.5, "f1_std": 0.0, "dev": {"accuracy": 0.7, "accuracy_std": 0.0},
            "learning_rate": 2e-5, "lr_grid": [{"learning_rate": 2e-5, "dev_mean": 0.7, "dev_std": 0.0}],
            "seeds": [1], "runs": [run], "confusion_matrix": [[4, 1], [1, 4]]}


def example() -> dict:
    return {
        "format": "bertfactory.results",
        "schema_version": 2,
        "created_by": "test",
        "checkpoint": {"path": "pretrain/final", "model_sha256": "ab" * 32, "tokenizer_sha256": "cd" * 32,
                       "num_parameters": 1234, "model": {"hidden_size": 32}},
        "config": {"finetune": {"epochs": 2}},
        "intrinsic": {"split": "heldout", "mask_variant": 0, "instances": 10, "masked_tokens": 40,
                      "mlm_accuracy": 0.25, "mlm_loss": 4.0, "mlm_perplexity": 54.6, "nsp_accuracy": 0.6,
                      "nsp_loss": 0.68, "chance_mlm_accuracy": 0.001,
                      "unigram_mlm_accuracy": 0.05, "unigram_mlm_loss": 6.2},
        "tasks": {"movie_sentiment": {
            "task_type": "classification", "primary_metric": "accuracy", "language": "en",
            "data": {"source_path": "x.txt", "source_sha256": "ef" * 32, "lines": 100, "split_method": "hash",
                     "sizes": {"train": 80, "dev": 9, "test": 10}, "label_names": ["negative", "positive"],
                     "label_counts": {s: {"negative": 4, "positive": 5} for s in ("train", "dev", "test")},
                     "dropped": {"zero_valence": 1}, "truncated": {"train": 0, "dev": 0, "test": 0}},
            "pretrained": scores(0.8),
            "random_init": scores(0.6),
            "tfidf_logreg": {"accuracy": 0.7, "accuracy_std": 0.0, "dev": {"accuracy": 0.6}, "details": {"C": 1.0}},
            "majority": {"accuracy": 0.5, "accuracy_std": 0.0, "f1": 0.0, "f1_std": 0.0, "dev": {"accuracy": 0.55},
                         "details": {"label": 0, "label_name": "negative"}},
            "comparison": {"primary_metric": "accuracy", "difference": 0.2, "seed": 1, "pretrained_only_correct": 2,
                           "random_init_only_correct": 0, "mcnemar_p_value": 0.5},
        }, "movie_valence": {
            "task_type": "regression", "primary_metric": "pearson", "language": "en",
            "data": {"source_path": "x.txt", "source_sha256": "ef" * 32, "lines": 100, "split_method": "hash",
                     "sizes": {"train": 80, "dev": 9, "test": 10}, "label_names": [], "dropped": {}, "truncated": {}},
            "pretrained": {**scores(0.8), "accuracy": None, "accuracy_std": None, "f1": None, "f1_std": None,
                           "confusion_matrix": None, "pearson": 0.4, "pearson_std": 0.1, "mse": 2.0, "mse_std": 0.5,
                           "dev": {"pearson": 0.3}, "runs": []},
            "majority": {"mse": 3.0, "mse_std": 0.0, "dev": {"mse": 3.1}, "details": {"value": 0.1}},
        }},
        "timings": {"total": 12.5},
    }


def clean(doc: dict) -> dict:
    """The document as written: absent, not null."""
    if isinstance(doc, dict):
        return {k: clean(v) for k, v in doc.items() if v is not None}
    if isinstance(doc, list):
        return [clean(v) for v in doc]
    return doc


def test_round_trip(tmp_path):
    path = tmp_path / "eval" / "results.json"
    written = write_results(path, example())
    assert written == clean(example())
    assert read_results(path) == clean(example())
    assert read_results(tmp_path / "eval") == clean(example())  # the directory works too
    assert json.loads(path.read_text()) == clean(example())


def test_optional_parts_may_be_absent(tmp_path):
    doc = clean(example())
    del doc["intrinsic"]
    del doc["tasks"]["movie_sentiment"]["random_init"]
    del doc["tasks"]["movie_sentiment"]["comparison"]
    write_results(tmp_path / "r.json", doc)
    assert read_results(tmp_path / "r.json") == doc


def _broken(tmp_path, mutate):
    doc = clean(example())
    mutate(doc)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema_version=1), "results schema version 1 is not supported .*supported: 2"),
        (lambda d: d.pop("schema_version"), "results schema version None is not supported"),
        (lambda d: d.update(format="something.else"), "'format' is 'something.else'"),
        (lambda d: d["intrinsic"].update(mlm_accuracy=1.5), r"intrinsic.mlm_accuracy: Input should be less than or equal to 1"),
        (lambda d: d["tasks"]["movie_sentiment"].pop("pretrained"), r"tasks.movie_sentiment.pretrained: Field required"),
        (lambda d: d["checkpoint"].update(colour="red"), r"checkpoint.colour: Extra inputs are not permitted"),
        (lambda d: d["tasks"]["movie_sentiment"]["pretrained"].update(pearson=0.5),
         r"pretrained: pearson not metrics of classification"),
        (lambda d: d["tasks"]["movie_sentiment"]["pretrained"].update(accuracy_std=-0.1),
         r"pretrained.accuracy_std: Input should be greater than or equal to 0"),
        (lambda d: d["tasks"]["movie_sentiment"]["pretrained"].update(f1=50.0), r"pretrained.f1: 50.0 is above 1"),
        (lambda d: d["tasks"]["movie_valence"].update(primary_metric="accuracy"),
         r"primary_metric 'accuracy' is not a regression metric"),
    ],
)
def test_invalid_results_are_refused(tmp_path, mutate, message):
    path = _broken(tmp_path, mutate)
    with pytest.raises(ContractError, match=message) as err:
        read_results(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "mutate, message",
    [  # a hand-edited number of the wrong JSON type is refused, not converted (it used to read as 0.75, 1.0, ...)
        (lambda d: d["tasks"]["movie_sentiment"]["pretrained"].update(accuracy="0.75"),
         r'tasks.movie_sentiment.pretrained.accuracy: Input should be a valid number, found "0.75"'),
        (lambda d: d["intrinsic"].update(mlm_accuracy=True), r"intrinsic.mlm_accuracy: Input should be a valid number, found true"),
        (lambda d: d["tasks"]["movie_sentiment"]["data"]["sizes"].update(train="80"),
         r'tasks.movie_sentiment.data.sizes.train: Input should be a valid integer, found "80"'),
        (lambda d: d["tasks"]["movie_sentiment"]["pretrained"]["runs"][0].update(best_epoch=2.0),
         r"pretrained.runs.0.best_epoch: Input should be a valid integer, found 2.0"),
        (lambda d: d["tasks"]["movie_sentiment"]["pretrained"]["runs"][0].update(stopped_early="no"),
         r'pretrained.runs.0.stopped_early: Input should be a valid boolean, found "no"'),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_key_and_value(tmp_path, mutate, message):
    path = _broken(tmp_path, mutate)
    with pytest.raises(ContractError, match=message) as err:
        read_results(path)
    assert str(path) in str(err.value) and len(str(err.value).splitlines()) == 2  # the file, then the one key


def test_the_reader_takes_what_the_writer_wrote_with_its_json_types(tmp_path):
    # strict reading: ints where floats are wanted (a timing of 3 s), arrays for the Wilson interval, NaN nowhere
    doc = clean(example())
    doc["timings"] = {"total": 3}
    write_results(tmp_path / "results.json", doc)
    back = read_results(tmp_path / "results.json")
    assert back["timings"] == {"total": 3.0}
    assert back["tasks"]["movie_sentiment"]["pretrained"]["runs"][0]["accuracy_ci95"] == pytest.approx([0.7, 0.9])


def test_writer_refuses_invalid_results_and_leaves_no_file(tmp_path):
    doc = copy.deepcopy(clean(example()))
    doc["tasks"]["movie_sentiment"]["pretrained"]["accuracy"] = -0.1
    with pytest.raises(ContractError, match="pretrained.accuracy"):
        write_results(tmp_path / "results.json", doc)
    assert list(tmp_path.iterdir()) == []


def test_missing_and_unparsable_files(tmp_path):
    with pytest.raises(ContractError, match="run `bertfactory evaluate` first"):
        read_results(tmp_path / "results.json")
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ContractError, match="is not valid JSON"):
        read_results(tmp_path / "results.json")
