"""results.json: a written file reads back equal, and the reader refuses other formats, unknown versions,
missing or extra keys and out-of-range values, naming the file."""

import copy
import json

import pytest

from bertfactory.errors import ContractError
from evaluation.results import read_results, write_results


def scores(acc):
    return {"accuracy": acc, "f1": 0.5, "dev_accuracy": 0.7, "best_epoch": 2, "steps": 30,
            "epochs": [{"epoch": 1, "train_loss": 0.69, "dev_accuracy": 0.6, "lr_end": 1e-4},
                       {"epoch": 2, "train_loss": 0.5, "dev_accuracy": 0.7, "lr_end": 0.0}]}


def example() -> dict:
    return {
        "format": "bertfactory.results",
        "schema_version": 1,
        "created_by": "test",
        "checkpoint": {"path": "pretrain/final", "model_sha256": "ab" * 32, "tokenizer_sha256": "cd" * 32,
                       "num_parameters": 1234, "model": {"hidden_size": 32}},
        "config": {"finetune": {"epochs": 2}},
        "intrinsic": {"split": "heldout", "mask_variant": 0, "instances": 10, "masked_tokens": 40,
                      "mlm_accuracy": 0.25, "mlm_loss": 4.0, "mlm_perplexity": 54.6, "nsp_accuracy": 0.6,
                      "nsp_loss": 0.68, "chance_mlm_accuracy": 0.001,
                      "unigram_mlm_accuracy": 0.05, "unigram_mlm_loss": 6.2},
        "tasks": {"movie_sentiment": {
            "data": {"source_path": "x.txt", "source_sha256": "ef" * 32, "lines": 100, "split_method": "hash",
                     "sizes": {"train": 80, "dev": 9, "test": 10}, "label_names": ["negative", "positive"],
                     "label_counts": {s: {"negative": 4, "positive": 5} for s in ("train", "dev", "test")},
                     "dropped": {"zero_valence": 1}},
            "pretrained": scores(0.8),
            "random_init": scores(0.6),
            "majority": {"label": 0, "label_name": "negative", "accuracy": 0.5, "f1": 0.0, "dev_accuracy": 0.55},
        }},
        "timings": {"total": 12.5},
    }


def test_round_trip(tmp_path):
    path = tmp_path / "eval" / "results.json"
    written = write_results(path, example())
    assert written == example()
    assert read_results(path) == example()
    assert read_results(tmp_path / "eval") == example()  # the directory works too
    assert json.loads(path.read_text()) == example()


def test_optional_parts_may_be_absent(tmp_path):
    doc = example()
    del doc["intrinsic"]
    del doc["tasks"]["movie_sentiment"]["random_init"]
    write_results(tmp_path / "r.json", doc)
    assert read_results(tmp_path / "r.json") == doc


def _broken(tmp_path, mutate):
    doc = example()
    mutate(doc)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema_version=2), "results schema version 2 is not supported .*supported: 1"),
        (lambda d: d.pop("schema_version"), "results schema version None is not supported"),
        (lambda d: d.update(format="something.else"), "'format' is 'something.else'"),
        (lambda d: d["intrinsic"].update(mlm_accuracy=1.5), r"intrinsic.mlm_accuracy: Input should be less than or equal to 1"),
        (lambda d: d["tasks"]["movie_sentiment"].pop("majority"), r"tasks.movie_sentiment.majority: Field required"),
        (lambda d: d["checkpoint"].update(colour="red"), r"checkpoint.colour: Extra inputs are not permitted"),
    ],
)
def test_invalid_results_are_refused(tmp_path, mutate, message):
    path = _broken(tmp_path, mutate)
    with pytest.raises(ContractError, match=message) as err:
        read_results(path)
    assert str(path) in str(err.value)


def test_writer_refuses_invalid_results_and_leaves_no_file(tmp_path):
    doc = copy.deepcopy(example())
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
