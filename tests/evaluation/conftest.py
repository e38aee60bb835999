"""Fixtures for the evaluation tests: a small run directory made from real text.

`make_eval_run` trains a small WordPiece tokenizer (BERT normaliser, pre-tokeniser and post-processor) on real
movie-review sentences, writes shards with the real shard writer (sentence pairs: the next sentence of the file
= IsNext, a random one = NotNext; 15 % of the tokens masked with BERT's 80/10/10 rule) and saves a tiny
BertForPreTraining, optionally after a few training steps so that its predictions are not all wrong, with
training.checkpoint.save_pretrained.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from bertfactory.io import sha256_file
from bertfactory.samples import sample_path
from preprocessing.shards import SCHEMA_VERSION, Manifest, SplitInfo, write_manifest, write_shard
from training.checkpoint import save_pretrained
from training.data import collate
from training.models.bert.model import BertConfig, BertForPreTraining

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def movie_sentences(limit: int | None = None) -> list[str]:
    lines = sample_path("movie_reviews").read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 2)[2] for line in lines[:limit]]


def write_wordpiece_tokenizer(path: Path, texts: list[str], vocab_size: int) -> Path:
    """A BERT-style WordPiece tokenizer trained on `texts` by the pipeline's own trainer, whose ids depend only on
    the words. (The bare `tokenizers` WordPieceTrainer gives the `##c` tokens their ids in a HashMap's order, which
    changes from process to process: every test model built on it came out different in each pytest worker, and a
    frozen-feature score of this fixture swung from 0.83 to 0.49 between two runs of the same commit.)"""
    from preprocessing.config import TokenizerConfig
    from preprocessing.tokenizer import train_tokenizer

    # min_frequency 0 and every character: the bare trainer's defaults, which these tests' vocabularies were made with
    cfg = TokenizerConfig(kind="wordpiece", vocab_size=vocab_size, lowercase=True, min_frequency=0, limit_alphabet=None)
    tok = train_tokenizer(lambda: texts, cfg)
    assert [tok.token_to_id(t) for t in SPECIALS] == list(range(len(SPECIALS)))
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def make_rows(token_ids: list[list[int]], vocab_size: int, rows: int, max_seq_len: int, variants: int,
              seed: int, doc_offset: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    budget = (max_seq_len - 3) // 2
    for r in range(rows):
        i = doc_offset + r
        not_next = int(rng.random() < 0.5)
        j = int(rng.integers(len(token_ids))) if not_next else (i + 1) % len(token_ids)
        a, b = token_ids[i % len(token_ids)][:budget] or [1], token_ids[j][:budget] or [1]
        ids = [2, *a, 3, *b, 3]
        candidates = [p for p, t in enumerate(ids) if t not in (2, 3)]
        n_mask = max(1, round(0.15 * len(candidates)))
        positions, tokens = [], []
        for _ in range(variants):
            chosen = np.sort(rng.choice(candidates, size=n_mask, replace=False))
            kinds = rng.random(n_mask)
            positions.append([int(p) for p in chosen])
            tokens.append([4 if k < 0.8 else int(rng.integers(5, vocab_size)) if k < 0.9 else ids[p]
                           for k, p in zip(kinds, chosen)])
        out.append({"input_ids": ids, "len_a": len(a) + 2, "nsp_label": not_next, "mask_positions": positions,
                    "mask_tokens": tokens, "doc_id": i})
    return out


def write_shards(shard_dir: Path, tokenizer: Path, train: list[dict], heldout: list[dict], vocab_size: int,
                 variants: int, max_seq_len: int) -> None:
    splits = {}
    for split, data in (("train", train), ("heldout", heldout)):
        half = len(data) // 2
        infos = []
        for k, part in enumerate((data[:half], data[half:])):
            info = write_shard(shard_dir / split / f"part-{k:05d}.arrow", part, vocab_size)
            infos.append(info.model_copy(update={"path": f"{split}/{info.path}"}))
        splits[split] = SplitInfo(rows=len(data), tokens=sum(len(r["input_ids"]) for r in data), shards=infos)
    write_manifest(shard_dir, Manifest(
        schema_version=SCHEMA_VERSION, created_by="tests/evaluation/conftest.py",
        tokenizer={"path": "../tokenizer/tokenizer.json", "sha256": sha256_file(tokenizer), "vocab_size": vocab_size,
                   "special_ids": dict(zip(["pad", "unk", "cls", "sep", "mask"], range(5))), "lowercase": True},
        instance_format={"max_seq_len": max_seq_len}, masking={"variants": variants, "mask_prob": 0.15}, seed=0,
        config_hash="synthetic", counts={}, splits=splits, sources=[], runner={"name": "synthetic"}))


TINY = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=64)


def make_eval_run(run_dir: Path, vocab_size: int = 600, train_rows: int = 256, heldout_rows: int = 96,
                  max_seq_len: int = 48, variants: int = 2, train_steps: int = 30, seed: int = 0) -> Path:
    """RUN/tokenizer, RUN/shards and RUN/pretrain/final (a tiny model trained `train_steps` steps on the shards)."""
    texts = movie_sentences(3000)
    tokenizer = write_wordpiece_tokenizer(run_dir / "tokenizer" / "tokenizer.json", texts, vocab_size)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    vocab = tok.get_vocab_size()
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    train = make_rows(ids, vocab, train_rows, max_seq_len, variants, seed, 0)
    heldout = make_rows(ids, vocab, heldout_rows, max_seq_len, variants, seed + 1, 2000)
    write_shards(run_dir / "shards", tokenizer, train, heldout, vocab, variants, max_seq_len)

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab, **TINY)
    model = BertForPreTraining(config)
    if train_steps:
        from preprocessing.shards import ShardSet

        shards = ShardSet.open(run_dir / "shards", "train")
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        model.train()
        for step in range(train_steps):
            rows = [(step * 32 + k) % len(shards) for k in range(32)]
            batch = collate([shards.instance(r) for r in rows], 0, 16)
            model(**batch)["loss"].backward()
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    save_pretrained(model, config, tokenizer, run_dir / "pretrain" / "final", training={"steps": train_steps})
    metrics = [{"step": s, "loss": 9.0 - s / 10, "mlm_loss": 8.3 - s / 10, "nsp_loss": 0.7, "lr": 1e-3 * s / 30}
               for s in range(1, 31, 5)]
    (run_dir / "pretrain" / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return run_dir


def write_task_slice(path: Path, lines: int) -> Path:
    """About `lines` lines of the real movie-review file taken at an even stride (the file lists the positive
    sentences first, so a prefix would be one class), byte for byte with CRLF line ends."""
    every = sample_path("movie_reviews").read_bytes().split(b"\r\n")
    data = every[:: max(1, len(every) // lines)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\r\n".join(data) + b"\r\n")
    return path


@pytest.fixture(scope="session")
def eval_run(tmp_path_factory) -> Path:
    """A read-only tiny run directory shared by all evaluation tests (copy it before writing into it)."""
    with one_thread():
        return make_eval_run(tmp_path_factory.mktemp("evalrun") / "run")


@contextmanager
def one_thread():
    # Models this small gain nothing from a second thread, and on a busy 2-core machine two threads per process
    # oversubscribe the cores (measured: a fine-tuning step ~10x slower). Results are reproducible either way.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    with one_thread():
        yield


@pytest.fixture
def make_tokenizer():
    """make(path, sentences, vocab_size) -> a WordPiece tokenizer trained on the first `sentences` movie reviews."""
    return lambda path, sentences, vocab_size: write_wordpiece_tokenizer(path, movie_sentences(sentences), vocab_size)


@pytest.fixture
def task_slice():
    """make(path, lines) -> a movie-review file of about `lines` real lines (both classes), CRLF."""
    return write_task_slice
