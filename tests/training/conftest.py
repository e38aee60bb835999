"""Fixtures for the training tests: a tiny run directory (WordLevel tokenizer + synthetic shards written with the
real shard writer) on which a tiny BERT can learn something in seconds.

The synthetic text is counting: sentence A is a run of consecutive words w_s, w_s+1, ... (mod the word count);
sentence B continues A (IsNext) or starts at a random word (NotNext). Masked words are predictable from their
neighbours and NSP from the junction, so both losses fall quickly when training works.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertfactory.io import sha256_file
from preprocessing.shards import SCHEMA_VERSION, Manifest, SplitInfo, write_manifest, write_shard

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = range(5)


def write_tokenizer(path: Path, words: int) -> Path:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": len(SPECIALS) + i for i in range(words)})
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def synthetic_rows(rows: int, words: int, variants: int, max_seq_len: int, seed: int, doc_offset: int = 0,
                   min_seq_len: int = 12, not_next_prob: float = 0.5) -> list[dict]:
    rng = np.random.default_rng(seed)
    vocab_size = len(SPECIALS) + words
    out = []
    for r in range(rows):
        total = int(rng.integers(min_seq_len - 3, max_seq_len - 3 + 1))
        len_a_words = int(rng.integers(3, total - 3))
        len_b_words = total - len_a_words
        start = int(rng.integers(words))
        a = [(start + i) % words for i in range(len_a_words)]
        not_next = int(rng.random() < not_next_prob)
        b_start = int(rng.integers(words)) if not_next else (start + len_a_words) % words
        b = [(b_start + i) % words for i in range(len_b_words)]
        ids = [CLS] + [len(SPECIALS) + w for w in a] + [SEP] + [len(SPECIALS) + w for w in b] + [SEP]
        candidates = [i for i, t in enumerate(ids) if t not in (CLS, SEP)]
        n_mask = max(1, round(0.15 * len(candidates)))
        positions, tokens = [], []
        for _ in range(variants):
            chosen = np.sort(rng.choice(candidates, size=n_mask, replace=False))
            kinds = rng.random(n_mask)
            toks = [MASK if k < 0.8 else int(rng.integers(len(SPECIALS), vocab_size)) if k < 0.9 else ids[p]
                    for k, p in zip(kinds, chosen)]
            positions.append([int(p) for p in chosen])
            tokens.append(toks)
        out.append({"input_ids": ids, "len_a": len_a_words + 2, "nsp_label": not_next,
                    "mask_positions": positions, "mask_tokens": tokens, "doc_id": doc_offset + r})
    return out


def make_run(run_dir: Path, train_rows: int = 256, heldout_rows: int = 64, words: int = 40, variants: int = 3,
             max_seq_len: int = 32, seed: int = 0, shards: int = 2, min_seq_len: int = 12,
             not_next_prob: float = 0.5) -> Path:
    """A run directory with RUN/tokenizer/tokenizer.json and RUN/shards (manifest + train/heldout shards)."""
    tokenizer = write_tokenizer(run_dir / "tokenizer" / "tokenizer.json", words)
    vocab_size = len(SPECIALS) + words
    shard_dir = run_dir / "shards"
    splits = {}
    for split, rows, split_seed in (("train", train_rows, seed), ("heldout", heldout_rows, seed + 1)):
        data = synthetic_rows(rows, words, variants, max_seq_len, split_seed, doc_offset=0 if split == "train" else 10**6,
                              min_seq_len=min_seq_len, not_next_prob=not_next_prob)
        per = -(-len(data) // shards)
        infos = []
        for i in range(shards):
            info = write_shard(shard_dir / split / f"part-{i:05d}.arrow", data[i * per:(i + 1) * per], vocab_size)
            infos.append(info.model_copy(update={"path": f"{split}/{info.path}"}))
        splits[split] = SplitInfo(rows=len(data), tokens=sum(len(r["input_ids"]) for r in data), shards=infos)
    manifest = Manifest(
        schema_version=SCHEMA_VERSION,
        created_by="tests/training/conftest.py",
        tokenizer={"path": "../tokenizer/tokenizer.json", "sha256": sha256_file(tokenizer), "vocab_size": vocab_size,
                   "special_ids": dict(zip(["pad", "unk", "cls", "sep", "mask"], range(5))), "lowercase": False},
        instance_format={"max_seq_len": max_seq_len},
        masking={"variants": variants, "mask_prob": 0.15},
        seed=seed,
        config_hash="synthetic",
        counts={},
        splits=splits,
        sources=[],
        runner={"name": "synthetic"},
    )
    write_manifest(shard_dir, manifest)
    return run_dir


@pytest.fixture
def tiny_run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run")


@pytest.fixture(scope="module")
def shared_tiny_run(tmp_path_factory) -> Path:
    """A read-only tiny run shared by the tests of one module (do not write into it)."""
    return make_run(tmp_path_factory.mktemp("shared") / "run")


@pytest.fixture
def run_factory(tmp_path: Path):
    """make(name, **kwargs) -> a fresh tiny run directory under tmp_path (see make_run for the kwargs)."""
    return lambda name, **kwargs: make_run(tmp_path / name, **kwargs)


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (restored after): tiny models run fastest on one thread, and far faster than
    on two oversubscribed threads of a shared 2-core machine. Modules opt in with
    `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
