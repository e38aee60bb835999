"""`bertfactory inspect` validates a shard directory the way the training reader does (issue 23 item 5): shards
whose tokenizer was swapped, or whose tokenizer file is gone, are refused with one line (exit 2) instead of a
traceback while decoding."""

from __future__ import annotations

import shutil

import pytest

from bertfactory.io import sha256_file
from flows.cli import main
from tests.evaluation.conftest import make_eval_run, one_thread, write_wordpiece_tokenizer


@pytest.fixture(scope="module")
def shard_run(tmp_path_factory):
    with one_thread():
        return make_eval_run(tmp_path_factory.mktemp("inspect") / "run", train_steps=0)


def test_inspect_reads_intact_shards(shard_run, capsys):
    assert main(["inspect", str(shard_run)]) == 0
    assert "train[0]" in capsys.readouterr().out


def test_a_swapped_tokenizer_is_refused_as_pretrain_refuses_it(shard_run, tmp_path, capsys):
    run = shutil.copytree(shard_run, tmp_path / "run")
    tokenizer = run / "tokenizer" / "tokenizer.json"
    built_with = sha256_file(tokenizer)
    write_wordpiece_tokenizer(tokenizer, ["a tiny foreign vocabulary"], 40)  # ids past its end would crash decoding
    swapped = sha256_file(tokenizer)
    assert main(["inspect", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert f"was built with tokenizer sha256 {built_with}" in err and f"has sha256 {swapped}" in err, err

    from training.data import PretrainBatches  # the training reader refuses the same directory the same way

    with pytest.raises(Exception, match=f"was built with tokenizer sha256 {built_with}.* has sha256 {swapped}"):
        PretrainBatches.open(run / "shards", swapped, batch_size=4, seed=0)


def test_a_missing_tokenizer_file_is_refused_naming_it(shard_run, tmp_path, capsys):
    run = shutil.copytree(shard_run, tmp_path / "run")
    (run / "tokenizer" / "tokenizer.json").unlink()
    assert main(["inspect", str(run / "shards")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tokenizer" in err and "does not exist" in err, err


def test_a_row_past_the_split_is_refused_in_one_line_and_minus_one_is_the_last(shard_run, capsys):
    capsys.readouterr()
    assert main(["inspect", str(shard_run), "--index", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: --index 100000: split train of "), err
    assert "rows (indices 0 to" in err
    rows = int(err.split(" has ")[1].split(" rows")[0].replace(",", ""))
    assert main(["inspect", str(shard_run), "--index", "-1"]) == 0
    assert f"train[{rows - 1}]" in capsys.readouterr().out


def test_a_path_that_is_not_there_is_named_and_the_manifest_itself_is_read(shard_run, tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "runz")]) == 2  # was "no manifest.json in …; run preprocess first"
    assert capsys.readouterr().err == (f"error: {tmp_path / 'runz'}: no such directory (give a shard directory, "
                                       "RUN/shards, or a run directory)\n")
    assert main(["inspect", str(shard_run / "shards" / "manifest.json")]) == 0
    assert f"shards: {shard_run / 'shards'}" in capsys.readouterr().out


def test_inspect_help_explains_what_it_shows(capsys):
    with pytest.raises(SystemExit):
        main(["inspect", "--help"])
    assert "the model's input" in " ".join(capsys.readouterr().out.split())
