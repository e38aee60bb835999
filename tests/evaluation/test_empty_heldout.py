"""A corpus too small to hold out any document (README "First steps" on ten short files): the shards' held-out split
has no instances. The evaluation skips both held-out scores (BERT's intrinsic MLM/NSP, the checkpoint's own
objective) with one warning line each, as it does for a run directory without shards, and runs the tasks;
results.json leaves the scores out (never 0.0) and stays valid. Called directly, the scorers refuse the empty split
naming preprocess.heldout_fraction, not the pretraining batch size."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file
from evaluation.config import EvaluateConfig, IntrinsicConfig, ObjectiveEvalConfig
from evaluation.heldout import checkpoint_objective, evaluate_objective
from evaluation.intrinsic import empty_split, evaluate_intrinsic
from evaluation.results import read_results
from evaluation.run import run_evaluate
from preprocessing.shards import ShardSet, read_manifest, write_manifest
from training.checkpoint import load_pretrained, read_checkpoint_config
from training.config import ModelConfig
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig

from tests.evaluation.conftest import TINY, make_rows, movie_sentences, one_thread, write_shards, \
    write_wordpiece_tokenizer, write_task_slice


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():  # tests/evaluation/conftest.py: tiny models on one thread
        yield


def make_run_without_heldout(run_dir: Path) -> Path:
    """RUN/tokenizer (WordPiece on movie reviews), RUN/shards whose heldout split is empty (two empty shard files,
    as preprocess writes them) and RUN/pretrain/final pretrained 2 steps with mlm_nsp by the pretrain stage, so
    that the checkpoint records its objective and is a BertForPreTraining: both held-out scores would apply."""
    texts = movie_sentences(1500)
    tokenizer = write_wordpiece_tokenizer(run_dir / "tokenizer" / "tokenizer.json", texts, 400)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    vocab = tok.get_vocab_size()
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    write_shards(run_dir / "shards", tokenizer, make_rows(ids, vocab, 64, 32, 2, 0, 0), [], vocab, 2, 32)
    manifest = read_manifest(run_dir / "shards")  # the document counts preprocess records: none held out
    write_manifest(run_dir / "shards", manifest.model_copy(update={"counts": {"docs": {"train": 10, "heldout": 0}}}))
    pretrain(ModelConfig(**{**TINY, "max_position_embeddings": 32}),
             PretrainConfig(batch_size=16, max_steps=2, warmup_steps=1, learning_rate=1e-3, log_every=2,
                            save_every=1000, seed=1, num_threads=1, device="cpu", objective="mlm_nsp"), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def no_heldout_run(tmp_path_factory) -> Path:
    """Read-only: copy it before writing into it."""
    with one_thread():
        return make_run_without_heldout(tmp_path_factory.mktemp("noheldout") / "run")


def test_the_run_has_an_empty_heldout_split_and_both_scores_would_apply(no_heldout_run):
    shard_dir = no_heldout_run / "shards"
    assert len(ShardSet.open(shard_dir, "heldout")) == 0 and len(ShardSet.open(shard_dir, "train")) == 64
    final = no_heldout_run / "pretrain" / "final"
    model, _, _ = load_pretrained(final)
    assert type(model).__name__ == "BertForPreTraining"
    assert checkpoint_objective(read_checkpoint_config(final)) == "mlm_nsp"
    note = empty_split(shard_dir, "heldout")
    assert note == (f"{shard_dir}: split 'heldout' has no instances to evaluate on (0 of the corpus's 10 documents in "
                    "it); preprocess more documents or set a larger preprocess.heldout_fraction to get held-out scores")
    assert empty_split(shard_dir, "train") is None  # a split with instances
    assert empty_split(no_heldout_run / "nothing-here", "heldout") is None  # no shards: the caller's case


def test_evaluate_skips_the_held_out_scores_with_one_warning_each_and_runs_the_task(no_heldout_run, tmp_path,
                                                                                    caplog):
    run_dir = shutil.copytree(no_heldout_run, tmp_path / "run")
    task_file = write_task_slice(tmp_path / "reviews.txt", 200)
    cfg = EvaluateConfig.model_validate({
        "device": "cpu", "random_init_baseline": False, "baselines": ["majority"], "cache_encodings": False,
        "finetune": {"epochs": 1, "learning_rate": 1e-3, "batch_size": 32, "max_seq_len": 32, "seed": 3,
                     "num_seeds": 1, "max_train_examples": 40},
        "tasks": {"movie_sentiment": {"input": str(task_file)}},
    })
    assert cfg.intrinsic.enabled and cfg.objective.enabled  # the defaults: asked for, as `bertfactory evaluate` does
    with caplog.at_level(logging.WARNING):
        results = run_evaluate(cfg, run_dir)

    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "skipped" in r.getMessage()]
    shard_dir = run_dir / "shards"
    assert skipped == [
        f"evaluate.{part} skipped, the tasks still run: {shard_dir}: split 'heldout' has no instances to evaluate "
        "on (0 of the corpus's 10 documents in it); preprocess more documents or set a larger "
        "preprocess.heldout_fraction to get held-out scores" for part in ("intrinsic", "objective")]
    # absent, as for a run directory without shards (flows/evaluate_cli.py): never a score over 0 instances
    assert "intrinsic" not in results and "objective" not in results
    assert results["config"]["intrinsic"]["enabled"] is False and results["config"]["objective"]["enabled"] is False
    assert not (run_dir / "eval" / "parts" / "intrinsic.json").exists()
    assert not (run_dir / "eval" / "parts" / "objective.json").exists()
    assert "intrinsic" not in results["timings"] and "objective" not in results["timings"]
    # the rest of the evaluation went on: the task was fine-tuned and scored, the file is valid results
    task = results["tasks"]["movie_sentiment"]
    assert 0.0 <= task["pretrained"]["accuracy"] <= 1.0 and "majority" in task
    assert read_results(run_dir / "eval" / "results.json") == results
    report = (run_dir / "eval" / "report.md").read_text(encoding="utf-8")
    assert "Not run (`evaluate.intrinsic.enabled: false`)." in report and "| MLM accuracy |" not in report


def test_the_scorers_refuse_an_empty_split_naming_the_heldout_fraction(no_heldout_run):
    shard_dir = no_heldout_run / "shards"
    final = no_heldout_run / "pretrain" / "final"
    model, _, _ = load_pretrained(final)
    sha = sha256_file(no_heldout_run / "tokenizer" / "tokenizer.json")
    with pytest.raises(ContractError, match="split 'heldout' has no instances.*preprocess.heldout_fraction"):
        evaluate_intrinsic(model, shard_dir, sha, IntrinsicConfig(), torch.device("cpu"))
    # before the loader, whose refusal speaks of pretrain.batch_size=1 and a lower batch size
    with pytest.raises(ContractError, match="split 'heldout' has no instances.*preprocess.heldout_fraction") as err:
        evaluate_objective(model, read_checkpoint_config(final), shard_dir, sha, ObjectiveEvalConfig(),
                           torch.device("cpu"))
    assert "batch_size" not in str(err.value)
