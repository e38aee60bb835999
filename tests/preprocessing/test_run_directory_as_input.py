"""The run directory given as (or inside) the input: `bertfactory preprocess --input . --out .` is refused before
anything is written; `--input 'corpus/**/*.jsonl' --out corpus/run` reruns up to date (before: the rerun read the
run's own shards/quarantine.jsonl as corpus, moved the outputs aside as "changed inputs" and failed on
`shards.replaced-…/duplicates.jsonl: empty file (0 bytes)`)."""

from __future__ import annotations

import json
import random

from flows.cli import main

WORDS = ("river town stone bridge market morning harbour valley garden letter winter summer council school "
         "station library museum farmer teacher doctor painter sailor miller baker window ladder orchard meadow "
         "forest mountain village church castle tower island journey evening silver golden quiet bright narrow "
         "the the the and and of of to to a a in in with that it was for on is by").split()


def _documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(12))
            for _ in range(n)]


def _preprocess(inputs: str, out, capsys) -> tuple[int, str]:
    code = main(["preprocess", "--no-prefect", "--input", inputs, "--format", "jsonl", "--vocab-size", "200",
                 "--out", str(out), "--set", "preprocess.runner.preset=in_process",
                 "--set", "preprocess.heldout_fraction=0.3", "--set", "preprocess.instances.dupe_factor=1"])
    return code, capsys.readouterr().err


def _corpus(root):
    (root / "sub").mkdir(parents=True)
    for i, (name, text) in enumerate(zip(("a.jsonl", "sub/b.jsonl"), (_documents(3, 1), _documents(3, 2)))):
        (root / name).write_text("".join(json.dumps({"id": f"{i}-{j}", "text": t}) + "\n" for j, t in enumerate(text))
                                 + "{not json\n")  # a quarantined line: the run writes a non-empty quarantine.jsonl


def test_the_input_folder_as_the_run_directory_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus"
    _corpus(corpus)
    before = sorted(p.relative_to(corpus) for p in corpus.rglob("*"))
    monkeypatch.chdir(corpus)
    code, err = _preprocess(".", ".", capsys)
    assert code == 2, err
    assert err.splitlines() == ["error: .: this input is the run directory .: its shards/, tokenizer/ and replaced "
                                "outputs would be read as corpus; keep the corpus in a folder of its own, or write the "
                                "run into a folder below the input (--out DIR/run), which is left out"]
    assert sorted(p.relative_to(corpus) for p in corpus.rglob("*")) == before  # no .bertfactory/lock, no outputs


def test_a_glob_over_the_folder_of_its_run_directory_reruns_up_to_date(tmp_path, capsys, caplog):
    corpus = tmp_path / "corpus"
    _corpus(corpus)
    code, err = _preprocess(f"{corpus}/**/*.jsonl", corpus / "run", capsys)
    assert code == 0, err
    shards = {p: p.read_bytes() for p in (corpus / "run" / "shards").rglob("*") if p.is_file()}
    assert (corpus / "run" / "shards" / "quarantine.jsonl").read_text().count("\n") == 2
    caplog.clear()
    with caplog.at_level("INFO"):
        code, err = _preprocess(f"{corpus}/**/*.jsonl", corpus / "run", capsys)
    assert code == 0, err
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("preprocess: up to date") for m in said), said
    assert f"{corpus}/**/*.jsonl: left out 1 run directory ({corpus}/run/): not corpus" in said, said
    assert not [p for p in (corpus / "run").iterdir() if ".replaced-" in p.name]
    assert {p: p.read_bytes() for p in (corpus / "run" / "shards").rglob("*") if p.is_file()} == shards
