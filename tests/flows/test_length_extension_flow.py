"""The sequence-length extension recipe end to end, as a user runs it: `bertfactory run configs/tiny-modernbert.yaml`
(phase 1, 128-token rows, a model whose positions stop at 128), then `bertfactory run
configs/tiny-modernbert-long.yaml` (phase 2) pointed at phase 1's tokenizer and final weights, at reduced sizes: 256-
token rows and positions raised to the recipe's 1,024. Phase 2 adopts phase 1's tokenizer byte for byte, starts from
its weights, and its evaluate stage scores the held-out MLM at its own 256 tokens and, joined, at 512."""

from __future__ import annotations

import json

import pytest

from bertfactory.io import sha256_file

from .members import EVALUATE, PREPROCESS, REPO, TRAIN, _command, _sets

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cli_on_shared_prefect")]  # two recipe runs through Prefect

SHRINK = PREPROCESS + TRAIN + [o for o in EVALUATE if not o.startswith("evaluate.tasks=")] + ["evaluate.tasks={}"]


def test_phase2_continues_phase1_at_a_longer_length_through_bertfactory_run(tmp_path):
    phase1, phase2 = tmp_path / "phase1", tmp_path / "phase2"
    _command("run", str(REPO / "configs" / "tiny-modernbert.yaml"), "--run-dir", str(phase1),
             *_sets(SHRINK + ["model.max_position_embeddings=128"]))
    final = phase1 / "pretrain" / "final"
    assert json.loads((final / "config.json").read_text())["model"]["max_position_embeddings"] == 128

    _command("run", str(REPO / "configs" / "tiny-modernbert-long.yaml"), "--run-dir", str(phase2),
             *_sets(SHRINK + [f"pretrain.init_from={final}",
                              f"preprocess.tokenizer.path={phase1 / 'tokenizer' / 'tokenizer.json'}",
                              "preprocess.instances.max_seq_len=256",
                              "preprocess.masking.max_predictions_per_seq=77",  # 30 % of 256
                              "evaluate.objective.max_seq_len=512", "evaluate.objective.batch_size=4"]))
    assert sha256_file(phase2 / "tokenizer" / "tokenizer.json") == sha256_file(phase1 / "tokenizer" / "tokenizer.json")
    manifest = json.loads((phase2 / "shards" / "manifest.json").read_text())
    assert manifest["instance_format"]["max_seq_len"] == 256
    doc = json.loads((phase2 / "pretrain" / "final" / "config.json").read_text())
    assert doc["model"]["max_position_embeddings"] == 1024  # raised from phase 1's 128
    assert doc["training"]["fingerprint"]["pretrain"]["init_from"] == str(final)

    objective = json.loads((phase2 / "eval" / "results.json").read_text())["objective"]
    assert objective["max_seq_len"] == 512 and objective["headline"]["metric"] == "mlm_loss"
    assert 0 < objective["headline"]["value"] < 50
