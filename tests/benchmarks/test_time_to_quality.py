"""benchmarks/time_to_quality.py, so that the script cannot rot: its pieces on hand-made inputs (the held-out masks,
the decoded text, the time-to-target arithmetic) and one whole run at a tiny budget on seven English news articles
(both sides train from random init and every snapshot of both scores a finite held-out loss). No timing is asserted:
the speed is measured in benchmarks/RESULTS.md, not here."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bertfactory.samples import sample_path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "time_to_quality.py"
ENGLISH_ARTICLES = ("cnn_001", "cnn_002", "cnn_article", "fox13now_001", "time_001", "wired_001", "yna_co_kr")


@pytest.fixture(scope="module")
def ttq(load_benchmark):
    return load_benchmark("time_to_quality")


FACTS = {"special_ids": {"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4}, "vocab_size": 50, "max_seq_len": 8}


def test_heldout_masks_are_seeded_and_spare_special_tokens(ttq):
    rows = [[0, *range(5, 45), 2], [0, *range(10, 30), 2, *range(30, 40), 2]]
    first = ttq.heldout_batches(rows, FACTS, seed=0, batch_size=1)
    again = ttq.heldout_batches(rows, FACTS, seed=0, batch_size=1)
    other = ttq.heldout_batches(rows, FACTS, seed=1, batch_size=1)
    assert all((a[0] == b[0]).all() and (a[2] == b[2]).all() for a, b in zip(first, again))
    assert any((a[2] != b[2]).any() for a, b in zip(first, other))
    for (ids, attention, labels), row in zip(first, rows):
        scored = labels[0] != -100
        assert attention.sum() == len(row)
        assert not any(row[i] in (0, 1, 2, 3, 4) for i in scored.nonzero().flatten().tolist())
        assert (labels[0][scored] == ids.new_tensor(row)[scored]).all()  # the label is the original token
        assert (ids[0][~scored] == ids.new_tensor(row)[~scored]).all()  # unscored positions are untouched
    positions = sum(int((b[2] != -100).sum()) for b in ttq.heldout_batches(rows * 50, FACTS, seed=0))
    ordinary = 50 * (40 + 30)
    assert 0.10 * ordinary < positions < 0.20 * ordinary  # the collator's 15 %


def test_score_of_a_perfect_and_a_uniform_model(ttq):
    import torch

    batches = ttq.heldout_batches([[0, *range(5, 45), 2]] * 4, FACTS, seed=0)
    original = torch.tensor([[0, *range(5, 45), 2]] * 4)

    def perfect(ids, attention, scored):
        return torch.nn.functional.one_hot(original[: len(ids)][scored], 50).float() * 100

    assert ttq.score(perfect, batches)["mlm_acc"] == 1.0 and ttq.score(perfect, batches)["mlm_loss"] < 1e-6
    uniform = ttq.score(lambda ids, attention, scored: torch.zeros(int(scored.sum()), 50), batches)
    assert math.isclose(uniform["mlm_loss"], math.log(50), rel_tol=1e-6)


def test_peer_logits_at_scored_positions_are_its_forward_logits(ttq, tmp_path):
    import torch
    from safetensors.torch import save_model
    from transformers import BertConfig, BertForMaskedLM

    config = {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 24, "max_position_embeddings": 64, "type_vocab_size": 1, "pad_token_id": 1}
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(**config)).eval()
    save_model(model, str(tmp_path / "model.safetensors"))
    ids, attention, labels = ttq.heldout_batches([[0, *range(5, 45), 2], [0, *range(5, 25), 2]], FACTS, seed=0)[0]
    scored = labels != -100
    with torch.inference_mode():
        full = model(input_ids=ids, attention_mask=attention).logits[scored]
        partial = ttq.peer_logits(tmp_path, config)(ids, attention, scored)
    assert partial.shape == (int(scored.sum()), 50) and torch.allclose(partial, full, atol=1e-5)


def test_decoded_texts_split_at_special_tokens(ttq, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders

    tokenizer = Tokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "a": 2, "b": 3, "c": 4}, unk_token="a"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    texts = ttq.decoded_texts([[0, 2, 3, 1, 4, 1], [0, 1]], tmp_path / "tokenizer.json", {0, 1})
    assert texts == ["a b", "c"]  # a row packed across documents gives one text per document; empty parts none


def test_reach_ratios_and_bounds(ttq):
    curves = {"ours": [{"snapshot": "a", "wall_s": 10, "cpu_s": 20, "mlm_loss": 7.0},
                       {"snapshot": "b", "wall_s": 20, "cpu_s": 40, "mlm_loss": 5.0}],
              "peer": [{"snapshot": "a", "wall_s": 30, "cpu_s": 60, "mlm_loss": 8.0},
                       {"snapshot": "b", "wall_s": 60, "cpu_s": 88, "mlm_loss": 6.9}]}
    both = ttq.reach(curves, 6.9)
    assert both["ours"]["wall_s"] == 20 and both["peer"]["wall_s"] == 60
    assert both["ratio"] == 3.0 and both["ratio_kind"] == "=" and both["cpu_ratio"] == 88 / 40
    only_ours = ttq.reach(curves, 6.0)
    assert only_ours["peer"] is None and only_ours["ratio_kind"] == ">" and only_ours["ratio"] == 60 / 20
    assert ttq.ratio_cell(only_ours) == ">3.0x (CPU >2.2x)" and ttq.cell(only_ours["peer"]) == "> budget"
    at_first = ttq.reach(curves, 7.0)  # our first snapshot is there already: we may have been sooner
    assert at_first["ratio_kind"] == ">=" and at_first["ratio"] == 6.0 and at_first["cpu_ratio"] == 4.4
    assert ttq.cell(at_first["ours"]) == "<= 10 s (20 CPU s)"
    assert ttq.ratio_cell(at_first) == ">=6.0x (CPU >=4.4x)"
    assert ttq.reach(curves, 4.0)["ratio_kind"] == "neither"


def test_arguments(ttq):
    args = ttq.parse_args([])
    assert args.minutes == 9.0 and args.threads == 2 and args.target is None
    for bad in (["--minutes", "0"], ["--threads", "-1"], ["--snapshots", "0"]):
        with pytest.raises(SystemExit):
            ttq.parse_args(bad)


@pytest.mark.slow
def test_tiny_run_both_sides_learn_and_score_finite(ttq, tmp_path):
    corpus = tmp_path / "news.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for article in ENGLISH_ARTICLES:
            text = sample_path("newspaper4k", f"txt/{article}.txt").read_text(encoding="utf-8")
            f.write(json.dumps({"id": article, "text": text}) + "\n")
    overrides = [
        f"corpus.inputs=[{corpus}]", "corpus.format=jsonl", "corpus.lang=en", "preprocess.heldout_fraction=0.3",
        "preprocess.tokenizer={kind: bpe, vocab_size: 400, lowercase: false, min_frequency: 2}",
        "preprocess.instances={format: full-sentences, max_seq_len: 32}",
        "preprocess.masking={policy: token, dynamic: true, masked_lm_prob: 0.3, max_predictions_per_seq: 10}",
        "preprocess.shards={train_shards: 1, heldout_shards: 1}",
        "model.hidden_size=32", "model.intermediate_size=48", "pretrain.batch_size=8", "pretrain.warmup_steps=1",
    ]
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--minutes", "0.02", "--snapshots", "2", "--threads", "1",
                           "--calibration-steps", "2", "--peer-calibration-steps", "2", "--runs", str(runs),
                           *[a for line in overrides for a in ("--set", line)]],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads((runs / "results.json").read_text())
    ours, peer, config = result["ours"], result["peer"], result["peer_config"]
    assert result["ours_architecture"] == "ModernBertForMaskedLM"
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["intermediate_size"], config["vocab_size"]) == (
        32, ours["model"]["num_layers"], ours["model"]["num_heads"], 48, ours["model"]["vocab_size"])
    for side in ("ours", "peer"):
        points = result["curves"][side]
        assert points and all(math.isfinite(p["mlm_loss"]) and 0 <= p["mlm_acc"] <= 1 for p in points)
        assert [p["wall_s"] for p in points] == sorted(p["wall_s"] for p in points)
        assert all(p["wall_s"] > 0 and p["cpu_s"] >= 0 for p in points)
        assert result[side]["max_steps"] >= 2 and result[side]["parameters"] > 0
    assert points[-1]["snapshot"] == f"step-{peer['max_steps']}"  # the peer's last step is always a snapshot
    assert result["curves"]["ours"][-1]["snapshot"] == "final"
    assert result["target"]["target"] == min(p["mlm_loss"] for p in result["curves"]["peer"])
    assert result["target"]["peer"] is not None  # the default target is one the peer reached
    assert math.isfinite(result["unigram_loss"]) and [r["target"] for r in result["ladder"]] == list(ttq.LADDER)
    assert "| held-out MLM loss target |" in proc.stdout and "BertForMaskedLM" in proc.stdout
    assert not (runs / "ours" / "pretrain" / "checkpoints").exists()  # snapshots removed after scoring
