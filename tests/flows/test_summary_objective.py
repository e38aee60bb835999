"""flows/summary.py's rows for a member scored by its own objective (evaluate.objective): the headline loss against
its no-context baseline, the perplexities, and the objective's token accuracy where it reports one (a ModernBERT or
RoBERTa run has no BERT intrinsic section, so this is where its held-out MLM accuracy is printed)."""

from __future__ import annotations

from flows import summary


def _objective(**scores) -> dict:
    head = {"metric": "mlm_loss", "value": 5.24, "baseline": 6.97, "baseline_name": "unigram (no context)",
            "perplexity": 188.7, "baseline_perplexity": 1063.1}
    return {"objective": {"objective": "modernbert_mlm", "headline": head, "mlm_loss": 5.24, **scores}}


def test_the_objectives_accuracy_is_printed_with_its_loss(tmp_path, monkeypatch):
    monkeypatch.setattr(summary, "_results", lambda run_dir: _objective(mlm_acc=0.2301))
    rows = [(label, value) for _, label, value in summary.summary_rows(tmp_path)]
    assert rows == [("held-out modernbert_mlm mlm_loss", 5.24), ("  unigram (no context)", 6.97),
                    ("held-out modernbert_mlm mlm accuracy", 0.2301),
                    ("held-out modernbert_mlm perplexity", 188.7), ("  unigram (no context)", 1063.1)]
    assert "held-out modernbert_mlm mlm accuracy  0.2301" in summary.summary_table(tmp_path)


def test_no_accuracy_row_without_one(tmp_path, monkeypatch):
    monkeypatch.setattr(summary, "_results", lambda run_dir: _objective())
    labels = [label for _, label, _ in summary.summary_rows(tmp_path)]
    assert not any("accuracy" in label for label in labels) and len(labels) == 4
