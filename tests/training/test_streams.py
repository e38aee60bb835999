"""The stream loader (training/streams.py) and the memory Transformer-XL and XLNet carry across batches with it
(training/models/core/stream_memory.py): every slot reads its documents' segments in order, a row carried over from the
batch before computes exactly what the two segments computed in one walk, a reset row exactly what a fresh one
does, a run stopped at a checkpoint resumes the uninterrupted curve (the memory is saved with the training state),
and 2 gloo processes x B/2 slots train like 1 process x B.

Synthetic `clm` shards: documents of counting text (w_s, w_s+1, ...), each 3 segments of T tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertfactory.errors import ContractError
from preprocessing.shards import SplitInfo, read_manifest, write_manifest, write_shard
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.models.transformer_xl.model import TransformerXLConfig, TransformerXLLM
from training.models.xlnet.model import XLNetConfig, XLNetForPreTraining
from training.objectives.txl import recurrent_clm
from training.streams import StreamBatches

from .conftest import SPECIALS, make_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")

T = 16  # tokens per segment (the shards' max_seq_len)
SEGMENTS = 3  # segments per document
WORDS = 40


def clm_rows(docs: int, seed: int, doc_offset: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(docs):
        start = int(rng.integers(WORDS))
        stream = [len(SPECIALS) + (start + i) % WORDS for i in range(T * SEGMENTS)]
        for s in range(SEGMENTS):
            ids = stream[s * T:(s + 1) * T]
            rows.append({"input_ids": ids, "len_a": T, "nsp_label": 0, "mask_positions": [[1]], "mask_tokens": [[4]],
                         "doc_id": doc_offset + d, "segment_index": s})
    rng.shuffle(rows)  # shards hold rows in hash order, not in document order
    return rows


def make_clm_run(run_dir: Path, docs: int = 16) -> Path:
    """A run directory with clm shards (one mask variant, unused: the objectives undo masks)."""
    make_run(run_dir, words=WORDS, variants=1, max_seq_len=T, min_seq_len=T)
    shard_dir = run_dir / "shards"
    manifest = read_manifest(shard_dir)
    vocab_size = manifest.tokenizer.vocab_size
    splits = {}
    for split, count, seed, offset in (("train", docs, 0, 0), ("heldout", 4, 1, 10**6)):
        rows = clm_rows(count, seed, offset)
        halves = [rows[: len(rows) // 2], rows[len(rows) // 2:]]
        infos = []
        for i, part in enumerate(halves):
            info = write_shard(shard_dir / split / f"part-{i:05d}.arrow", part, vocab_size)
            infos.append(info.model_copy(update={"path": f"{split}/{info.path}"}))
        splits[split] = SplitInfo(rows=len(rows), tokens=len(rows) * T, shards=infos)
    write_manifest(shard_dir, manifest.model_copy(update={
        "instance_format": {"name": "clm", "max_seq_len": T}, "masking": {"variants": 1, "mask_prob": 0.15},
        "splits": splits}))
    return run_dir


@pytest.fixture(scope="module")
def clm_run(tmp_path_factory) -> Path:
    return make_clm_run(tmp_path_factory.mktemp("streams") / "run")


def _open(run: Path, batch_size: int, rank: int = 0, world_size: int = 1) -> StreamBatches:
    sha = read_manifest(run / "shards").tokenizer.sha256
    return StreamBatches.open(run / "shards", sha, batch_size, seed=5, rank=rank, world_size=world_size)


# ------------------------------------------------------------------------------------------------------ loader


def test_slots_read_each_documents_segments_in_order(clm_run):
    batches = _open(clm_run, 4)
    doc, seg = batches._doc_of_row, batches._seg_of_row
    assert batches.steps_per_epoch == 48 // 4
    seen = []
    for step in range(2 * batches.steps_per_epoch):
        rows = batches.rows_of(step)
        seen.extend(rows.tolist())
        cont = batches.continues(step)
        if step % batches.steps_per_epoch == 0:
            assert not cont.any()  # a new epoch (and the first step) restarts every slot
        else:
            previous = batches.rows_of(step - 1)
            # within an epoch a slot reads the next segment of its document, or a new document's first
            assert np.array_equal(cont, (doc[rows] == doc[previous]) & (seg[rows] == seg[previous] + 1))
            assert np.all(cont | (seg[rows] == 0))
        batch = batches.batch(step)
        assert batch["input_ids"].shape == (4, T)
        assert batch["stream_continues"].tolist() == cont.astype(int).tolist()
        for r, nxt in zip(rows, batch["stream_next"].tolist()):  # the target of the row's last token
            if seg[r] == SEGMENTS - 1:
                assert nxt == -100
            else:
                assert nxt == (batch["input_ids"][rows.tolist().index(r), -1].item() - len(SPECIALS) + 1) % WORDS \
                    + len(SPECIALS)
    per_epoch = len(seen) // 2
    assert sorted(seen[:per_epoch]) == list(range(48)) and sorted(seen[per_epoch:]) == list(range(48))
    assert seen[:per_epoch] != seen[per_epoch:]  # another document order each epoch


def test_ranks_own_their_slots_and_any_step_is_computed_alone(clm_run):
    whole = _open(clm_run, 4)
    ranks = [_open(clm_run, 4, rank=r, world_size=2) for r in range(2)]
    for step in (7, 0, 13, 5):  # out of order: no replay, nothing depends on the steps read before
        full = whole.batch(step)
        parts = [r.batch(step) for r in ranks]
        for key in ("input_ids", "stream_continues", "stream_next", "row_seeds"):
            assert torch.equal(torch.cat([p[key] for p in parts]), full[key]), key
        assert [p["stream_slots"].tolist() for p in parts] == [[0, 1], [0, 1]]


def test_shards_of_another_format_are_refused(tmp_path):
    run = make_run(tmp_path / "run")
    with pytest.raises(ContractError, match="instance format 'clm'"):
        _open(run, 4)


def test_stream_batches_only_with_a_recurrent_objective():
    with pytest.raises(ValueError, match="txl_clm or plm"):
        PretrainConfig(objective="mlm", stream_batches=True)


# ------------------------------------------------------------------------------------------------------ models


def _txl(train_segments: int = 1) -> TransformerXLLM:
    torch.manual_seed(0)
    cfg = TransformerXLConfig(vocab_size=45, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                              dropout=0.0, attention_dropout=0.0, mem_len=T, train_segments=train_segments,
                              initializer_range=0.3)  # large weights: attention that depends on the context
    return TransformerXLLM(cfg).eval()


def _stream_batch(ids: torch.Tensor, continues: list[int], next_tokens: torch.Tensor) -> dict:
    b = ids.shape[0]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
            "masked_positions": torch.zeros(b, 1, dtype=torch.long), "masked_labels": torch.full((b, 1), -100),
            "nsp_labels": torch.zeros(b, dtype=torch.long), "stream_slots": torch.arange(b),
            "stream_continues": torch.tensor(continues), "stream_next": next_tokens}


def test_txl_memory_crosses_batches_exactly():
    """Two consecutive batches of a slot = one walk over the two segments in one row (train_segments 2)."""
    torch.manual_seed(1)
    text = torch.randint(5, 45, (3, 2 * T + 1))
    first, second = text[:, :T], text[:, T:2 * T]
    streamed = _txl()
    out1 = recurrent_clm(streamed, _stream_batch(first, [0, 0, 0], text[:, T]))
    out2 = recurrent_clm(streamed, _stream_batch(second, [1, 1, 1], text[:, 2 * T]))
    whole = _txl(train_segments=2)
    joined = _stream_batch(text[:, :2 * T], [0, 0, 0], text[:, 2 * T])
    del joined["stream_slots"]  # no carried memory: the within-row walk only
    out = recurrent_clm(whole, joined)
    nll = out1["clm_loss"] * out1["clm_count"] + out2["clm_loss"] * out2["clm_count"]
    assert int(out1["clm_count"] + out2["clm_count"]) == int(out["clm_count"]) == 3 * 2 * T
    assert torch.allclose(nll / (out1["clm_count"] + out2["clm_count"]), out["clm_loss"], atol=1e-6)
    # a slot that starts a new document computes what a model without memory does
    reset = recurrent_clm(streamed, _stream_batch(second, [0, 0, 0], text[:, 2 * T]))
    fresh = recurrent_clm(_txl(), _stream_batch(second, [0, 0, 0], text[:, 2 * T]))
    assert torch.allclose(reset["clm_loss"], fresh["clm_loss"], atol=1e-6)
    assert not torch.allclose(reset["clm_loss"], out2["clm_loss"], rtol=0.0, atol=1e-6)  # the memory mattered


def test_xlnet_memory_crosses_batches_and_resets():
    torch.manual_seed(2)
    cfg = XLNetConfig(vocab_size=45, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, dropout=0.0,
                      attention_dropout=0.0, mem_len=12, predict_fraction=4, initializer_range=0.3)
    torch.manual_seed(0)
    model = XLNetForPreTraining(cfg).eval()
    text = torch.randint(5, 45, (2, 2 * T))
    types, mask, seeds = torch.zeros(2, T, dtype=torch.long), torch.ones(2, T, dtype=torch.long), torch.tensor([3, 4])
    slots = torch.arange(2)
    model(text[:, :T], types, mask, row_seeds=seeds, stream_slots=slots, stream_continues=torch.tensor([0, 0]))
    kept = [m.clone() for m in model.stream_memory.layers]
    carried = model(text[:, T:], types, mask, row_seeds=seeds, stream_slots=slots,
                    stream_continues=torch.tensor([1, 0]))
    # the carried memory = explicit mems of the first segment's last mem_len layer inputs; a reset row = no memory
    explicit = model(text[:, T:], types, mask, row_seeds=seeds, mems=kept,
                     mem_valid=torch.tensor([[True] * 12, [False] * 12]))
    assert torch.allclose(carried["plm_logits"], explicit["plm_logits"], atol=1e-5)
    none = model(text[:, T:], types, mask, row_seeds=seeds)
    targets = carried["plm_labels"].view(2, -1)
    rows = carried["plm_logits"].view(2, targets.shape[1], -1)
    assert torch.allclose(rows[1], none["plm_logits"].view(2, targets.shape[1], -1)[1], atol=1e-5)
    assert not torch.allclose(rows[0], none["plm_logits"].view(2, targets.shape[1], -1)[0], atol=1e-4)


def test_heldout_perplexity_walks_each_document_with_the_cache(clm_run):
    """evaluate.objective on a Transformer-XL over clm shards: the held-out documents walked as streams score
    exactly what evaluate_long gives walking each document alone with its memory (2 slots x 2 whole documents)."""
    from evaluation.config import ObjectiveEvalConfig
    from evaluation.heldout import evaluate_objective

    model = _txl()
    sha = read_manifest(clm_run / "shards").tokenizer.sha256
    trained_with = {"training": {"fingerprint": {"pretrain": {"objective": "txl_clm"}}}}  # its config.json's record
    scores = evaluate_objective(model, trained_with, clm_run / "shards", sha,
                                ObjectiveEvalConfig(batch_size=2, max_batches=None), torch.device("cpu"))
    heldout = StreamBatches.open(clm_run / "shards", sha, 2, seed=0, split="heldout")
    docs = [torch.from_numpy(np.concatenate([heldout.shards.instance(int(r)).input_ids for r in rows]).astype(np.int64))
            for rows in heldout._doc_rows]
    walks = [model.evaluate_long(doc, segment_len=T) for doc in docs]
    nll = sum(w["nll"] * w["tokens"] for w in walks) / sum(w["tokens"] for w in walks)
    assert scores["clm_loss"] == pytest.approx(nll, rel=1e-6)
    assert scores["headline"]["baseline"] == scores["unigram_token_loss"] > 0


# ------------------------------------------------------------------------------------------------ training runs

MODELS = {
    "txl_clm": {"transformer_xl": {"mem_len": T, "train_segments": 1}},
    "plm": {"xlnet": {"mem_len": 12, "predict_fraction": 4}},
}
BASE = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, hidden_dropout=0.0, attention_dropout=0.0)
CFG = dict(batch_size=4, max_steps=6, warmup_steps=2, learning_rate=3e-3, log_every=1, save_every=4, seed=11,
           num_threads=1, device="cpu", stream_batches=True)


def _losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("objective", sorted(MODELS))
def test_a_stopped_run_resumes_with_its_memory(objective, tmp_path):
    from training.pretrain import pretrain

    model = ModelConfig(**BASE, **MODELS[objective])
    cfg = PretrainConfig(**CFG, objective=objective)
    straight = make_clm_run(tmp_path / "straight")
    pretrain(model, cfg, straight)
    resumed = make_clm_run(tmp_path / "resumed")
    # stopped after step 4: every slot is then inside a document (3 segments each), so step 5 carries the memory
    pretrain(model, cfg, resumed, stop_after=4)
    state = torch.load(resumed / "pretrain/checkpoints/step-4/training_state.pt", weights_only=True)
    memory = state["stream_memory"]
    assert memory["valid"].shape[0] == 4 and memory["valid"].any()  # the slots' memory is part of the state
    pretrain(model, cfg, resumed)
    assert _losses(resumed) == _losses(straight)


@pytest.mark.slow
@pytest.mark.parametrize("objective", sorted(MODELS))
def test_two_processes_train_like_one(objective, tmp_path):
    """DDP and FSDP, each stopped at the step-4 checkpoint and resumed: the losses of 1 process x 4 slots."""
    from training.pretrain import pretrain

    from .ranks import launch_ranks

    model = ModelConfig(**BASE, **MODELS[objective])
    cfg = PretrainConfig(**CFG, objective=objective)
    single = make_clm_run(tmp_path / "single")
    pretrain(model, cfg, single)
    ddp = make_clm_run(tmp_path / "ddp")
    launch_ranks(model, cfg, ddp, stop_after=4)  # stopped at the step-4 checkpoint, then resumed on 2 ranks
    launch_ranks(model, cfg, ddp)
    assert _losses(ddp) == pytest.approx(_losses(single), rel=1e-5)
    fsdp = make_clm_run(tmp_path / "fsdp")
    launch_ranks(model, cfg.model_copy(update={"parallelism": "fsdp"}), fsdp, stop_after=4)
    launch_ranks(model, cfg.model_copy(update={"parallelism": "fsdp"}), fsdp)
    assert _losses(fsdp) == pytest.approx(_losses(single), rel=1e-5)
