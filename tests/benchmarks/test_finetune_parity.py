"""benchmarks/finetune_parity.py at a reduced size (one task, 200 training questions, 100 dev / 100 test, 3 epochs,
length 64, one seed, one thread): `bertfactory import-hf` + `bertfactory evaluate --task-file` against transformers'
Trainer on the same files. Both sides must run, report the same hyperparameters (ours from its results.json, the
peer from its TrainingArguments), read the same examples, keep their best dev epoch, tokenize alike, learn (beat the
test majority rate) and land within a loose tolerance of each other. The checker itself is tested on made-up runs
(it must be able to fail). Skipped without the minilm and trec samples."""

from __future__ import annotations

import copy
import json

import pytest

from bertfactory.samples import is_fetched

TOLERANCE = 0.15  # test accuracy, ours vs peer, 100 test questions and one seed: loose
REDUCED = ["--tasks", "trec_coarse", "--train-limit", "200", "--eval-limit", "100", "--epochs", "3", "--max-len", "64",
           "--seeds", "1", "--batch", "16", "--lr", "1e-4", "--threads", "1"]


@pytest.fixture(scope="module")
def parity(load_benchmark):
    return load_benchmark("finetune_parity")


def made_up_run(parity, accuracy: float, lr: float = 1e-4) -> dict:
    hp = {k: 1 for k in parity.COMPARED} | {"learning_rate": lr, "adam_betas": [0.9, 0.999]}
    return {"accuracy": accuracy, "best_epoch": 2, "dev_curve": [0.5, 0.7, 0.7], "hyperparameters": hp,
            "cpu_s": 10.0, "wall_s": 12.0, "finetune_cpu_s": 8.0, "finetune_wall_s": 9.0}


def test_the_checks_catch_a_differing_setting_a_wrong_epoch_and_a_gap(parity):
    ours, peer = made_up_run(parity, 0.80), made_up_run(parity, 0.82)
    assert parity.compare_run(ours, peer) == {"hyperparameters_differ": {}, "ours_first_best": True,
                                              "peer_first_best": True}
    other = made_up_run(parity, 0.82, lr=5e-5)
    other["best_epoch"] = 3  # a tie kept the later epoch
    checks = parity.compare_run(ours, other)
    assert checks["hyperparameters_differ"] == {"learning_rate": {"ours": 1e-4, "peer": 5e-5}}
    assert checks["peer_first_best"] is False
    summary = parity.summarize([{"seed": 1, "ours": ours, "peer": peer, "checks": parity.compare_run(ours, peer)}])
    assert summary["difference"] == pytest.approx(-0.02) and summary["within_1_point"] is False
    assert summary["hyperparameters_equal"] and summary["cpu_ratio"] == 1.0
    better = copy.deepcopy(ours) | {"accuracy": 0.815}
    assert parity.summarize([{"seed": 1, "ours": better, "peer": peer,
                              "checks": parity.compare_run(better, peer)}])["within_1_point"] is True


def test_ours_is_pinned_to_one_rate_one_seed_and_one_fine_tuning(parity):
    """The --set list of our run: every pinned setting, nothing else fine-tuned (no random-init twin, no baselines),
    and a learning rate named (so that --task-file does not turn the size-scaled grid on)."""
    args = parity.parse_args(REDUCED)
    sets = parity.ours_sets(parity.hyperparameters(args), 7, 1)
    values = dict(s.split("=", 1) for s in sets[1::2])
    assert sets[0::2] == ["--set"] * len(values)
    assert values["evaluate.finetune.learning_rate"] == "0.0001" and values["evaluate.finetune.seed"] == "7"
    assert values["evaluate.finetune.num_seeds"] == "1" and values["evaluate.finetune.learning_rates"] == "null"
    assert values["evaluate.random_init_baseline"] == "false" and values["evaluate.baselines"] == "[]"
    assert (values["evaluate.finetune.max_seq_len"], values["evaluate.finetune.batch_size"]) == ("64", "16")


@pytest.mark.slow
@pytest.mark.skipif(not (is_fetched("minilm") and is_fetched("trec")), reason="needs `bertfactory samples fetch minilm trec`")
def test_reduced_parity_both_sides_run_alike(parity, tmp_path):
    args = parity.parse_args([*REDUCED, "--runs", str(tmp_path / "runs")])
    result = parity.run(args)
    assert args.out == tmp_path / "runs" / "results.json" and args.out.is_file()  # not the full size's JSON
    task = result["tasks"]["trec_coarse"]
    assert task["files"]["sizes"] == {"train": 200, "dev": 100, "test": 100}
    assert task["tokenizer_parity"]["differ"] == 0 and task["tokenizer_parity"]["texts"] == 400
    (run,) = task["runs"]
    ours, peer = run["ours"], run["peer"]
    # both ran: a test accuracy, a dev score per epoch, CPU time, and the fine-tuning timed inside each process
    for side in (ours, peer):
        assert len(side["dev_curve"]) == 3 and 0.0 <= side["accuracy"] <= 1.0
        assert 0 < side["finetune_cpu_s"] < side["cpu_s"]
    # the same settings as each side reports them, and the same examples read
    assert ours["hyperparameters"] == peer["hyperparameters"], run["checks"]["hyperparameters_differ"]
    assert ours["hyperparameters"]["learning_rate"] == 1e-4 and ours["hyperparameters"]["seed"] == 1
    assert ours["hyperparameters"]["total_steps"] == 39 and ours["hyperparameters"]["train_examples"] == 200
    assert run["checks"]["ours_first_best"] and run["checks"]["peer_first_best"]
    # both learned, and alike
    majority = task["files"]["test_majority"]
    assert ours["accuracy"] > majority and peer["accuracy"] > majority, (ours["accuracy"], peer["accuracy"], majority)
    assert abs(ours["accuracy"] - peer["accuracy"]) <= TOLERANCE, (ours["accuracy"], peer["accuracy"])
    summary = task["summary"]
    assert summary["hyperparameters_equal"] and summary["selection_ok"]
    assert summary["cpu_ratio"] == pytest.approx(ours["cpu_s"] / peer["cpu_s"])
    assert "| trec_coarse (200 / 100 / 100) |" in parity.tables(result)


def test_a_stopped_comparison_continues_from_the_pairs_it_finished(parity, tmp_path, monkeypatch):
    """A seed's pair is reused only under the same commit (clean tree), settings, threads and file bytes; a pair that
    is missing or was measured under another key runs again."""
    files = {"paths": {}}
    for split in ("train", "dev", "test"):
        files["paths"][split] = str(tmp_path / f"{split}.jsonl")
        (tmp_path / f"{split}.jsonl").write_text(f'{{"id": "{split}", "text": "a", "label": "x"}}\n')
    hp = parity.hyperparameters(parity.parse_args(REDUCED))
    clean = {"commit": "abc1234", "dirty": False, "date": "2026-11-29T18:00:00+00:00"}
    key = parity.pair_key(clean, hp, 1, files, 1)
    assert key == parity.pair_key(dict(clean, date="2026-11-30T09:00:00+00:00"), hp, 1, files, 1)
    assert key != parity.pair_key(dict(clean, commit="def5678"), hp, 1, files, 1)
    assert key != parity.pair_key(clean, dict(hp, learning_rate=5e-5), 1, files, 1)
    assert key != parity.pair_key(clean, hp, 2, files, 1) and key != parity.pair_key(clean, hp, 1, files, 2)
    dirty = dict(clean, dirty=True)
    assert parity.pair_key(dirty, hp, 1, files, 1) != parity.pair_key(dict(dirty, date="later"), hp, 1, files, 1)
    (tmp_path / "dev.jsonl").write_text('{"id": "dev", "text": "b", "label": "x"}\n')
    assert key != parity.pair_key(clean, hp, 1, files, 1)

    # run_task: seed 1 finished earlier under this key, seed 2 under another: only seed 2 is measured
    args = parity.parse_args([*REDUCED, "--seeds", "2", "--runs", str(tmp_path / "runs")])
    monkeypatch.setattr(parity, "write_task_files", lambda *a: files | {"sizes": {"train": 1, "dev": 1, "test": 1},
                                                                        "label_names": ["x"], "test_majority": 1.0})
    monkeypatch.setattr(parity, "tokenizer_parity", lambda *a: {})
    measured = []

    def side(accuracy):
        def run(model_dir, task, files, hp, seed, run_dir, threads):
            measured.append((run_dir.name, seed))
            return made_up_run(parity, accuracy)
        return run

    monkeypatch.setattr(parity, "run_ours", side(0.8))
    monkeypatch.setattr(parity, "run_peer", side(0.7))
    root = tmp_path / "runs" / "trec_coarse"
    root.mkdir(parents=True)
    earlier = {"ours": made_up_run(parity, 0.9), "peer": made_up_run(parity, 0.9)}
    (root / "seed1.json").write_text(json.dumps(
        earlier | {"key": parity.pair_key(clean, hp, 1, files, 1)}))
    (root / "seed2.json").write_text(json.dumps(earlier | {"key": "another"}))
    entry = parity.run_task("trec_coarse", args, tmp_path, tmp_path, hp, clean)
    assert measured == [("ours-seed2", 2), ("peer-seed2", 2)]
    assert [(r["seed"], r["ours"]["accuracy"], r["measured_earlier"]) for r in entry["runs"]] == \
        [(1, 0.9, True), (2, 0.8, False)]
    assert parity.pair_key(clean, hp, 1, files, 2) == json.loads((root / "seed2.json").read_text())["key"]
