"""bertfactory/portable_paths.py: absolute paths inside the run directory or the samples cache get one name on every
machine; everything else is left as written."""

from pathlib import Path

from bertfactory.portable_paths import portable_name, portable_values


def test_paths_inside_the_run_directory_and_the_samples_cache_are_named_by_their_place(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFACTORY_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "work" / "run"
    assert portable_name(str(run / "tapt" / "corpus.jsonl"), run) == "RUN/tapt/corpus.jsonl"
    assert portable_name(str(run), run) == "RUN"
    assert portable_name(str(tmp_path / "cache/samples/minilm/tokenizer.json"), run) == "SAMPLES/minilm/tokenizer.json"
    # the run directory given relative or through a link, the path spelled with .. : one name
    monkeypatch.chdir(tmp_path)
    assert portable_name(str(run / "x" / ".." / "tapt" / "corpus.jsonl"), Path("work/run")) == "RUN/tapt/corpus.jsonl"
    (tmp_path / "link").symlink_to(run.parent)
    assert portable_name(str(tmp_path / "link/run/shards"), run) == "RUN/shards"


def test_everything_else_is_left_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFACTORY_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    for value in (str(tmp_path / "elsewhere.txt"), "runs/x/tapt/corpus.jsonl", "sample:enwiki", "s3://b/run/x",
                  "tapt:tasks", "wordpiece", "", str(tmp_path / "run-other/file")):
        assert portable_name(value, run) == value
    assert portable_name(str(run / "a"), None) == str(run / "a")  # no run directory: only SAMPLES is a root


def test_config_dumps_are_rewritten_everywhere_inside(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFACTORY_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    config = {"corpus": {"inputs": [str(run / "tapt/corpus.jsonl"), "sample:enwiki"], "lang": None},
              "preprocess": {"tokenizer": {"path": str(tmp_path / "cache/samples/minilm/tokenizer.json"),
                                           "vocab_size": 30522}, "seeds": (1, 2)}}
    assert portable_values(config, run) == {
        "corpus": {"inputs": ["RUN/tapt/corpus.jsonl", "sample:enwiki"], "lang": None},
        "preprocess": {"tokenizer": {"path": "SAMPLES/minilm/tokenizer.json", "vocab_size": 30522}, "seeds": [1, 2]}}
