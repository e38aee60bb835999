"""The trainer at scale on this CPU, three ratios measured in one run (issue 5's performance section):

    python benchmarks/trainer_scale.py            # all three
    python benchmarks/trainer_scale.py --only loader

1. loader: tokens/s the loader delivers (training/data.py PretrainBatches.batch, full-length 128-token instances of
   a 30k vocabulary, batch 256 as BERT-base's recipe) in the loop and with prefetching threads
   (training/prefetch.py), over the tokens/s a BERT-base training step consumes on this machine (our
   BertForPreTraining, forward + backward + clip + AdamW, measured here) - the headroom; target >= 20x.
2. ddp: 2 gloo processes (1 thread each, DDP, half the batch each) vs 1 process (2 threads, the whole batch) at
   the same global batch, the tiny shape of configs/local.yaml: efficiency = tokens/s(2) / tokens/s(1).
3. trainer: seconds per step of training.trainer.Trainer (metrics window, step guard, scalars read once per step,
   tqdm) vs a bare loop (forward, backward, clip, AdamW, schedule) on the same model and the same loader batches,
   alternating; overhead target <= 5%.

The shard set is written by the benchmark itself (synthetic counting text through the real shard writer, as the
training tests do). Each number is a single run on a shared 2-core machine: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "training"))  # make_run: synthetic shards through the real writer

SEQ, BERT_BASE_BATCH = 128, 256
TINY = dict(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512)  # configs/local.yaml's model


def _shards(root: Path, rows: int, words: int) -> tuple[Path, str]:
    from conftest import make_run

    from bertfactory.io import sha256_file

    run = make_run(root / "run", train_rows=rows, heldout_rows=8, words=words, variants=2, max_seq_len=SEQ,
                   min_seq_len=SEQ, shards=4)
    return run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json")


def _loader_tokens_per_s(batches, workers: int, steps: int) -> float:
    from training.prefetch import per_thread, prefetch_batches

    fn = per_thread(batches, "batch") if workers else batches.batch
    started = time.perf_counter()
    tokens = sum(int(b["attention_mask"].sum()) for b in prefetch_batches(fn, 0, workers, end_step=steps))
    return tokens / (time.perf_counter() - started)


def bench_loader(root: Path) -> None:
    import torch

    from pretrain_step import SHAPES, _batch, time_training_steps
    from training.data import PretrainBatches
    from training.models.bert.model import BertConfig, BertForPreTraining

    shard_dir, tok_sha = _shards(root, rows=BERT_BASE_BATCH * 8, words=30517)
    batches = PretrainBatches.open(shard_dir, tok_sha, BERT_BASE_BATCH, seed=1)
    steps = batches.steps_per_epoch * 2  # crosses an epoch boundary
    loop = _loader_tokens_per_s(batches, 0, steps)
    threaded = _loader_tokens_per_s(batches, 2, steps)

    hidden, layers, heads, inter, vocab = SHAPES["base"]
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads,
                                          intermediate_size=inter, max_position_embeddings=512))
    batch = _batch(vocab, batch=8)  # tokens/s of a step barely depends on the batch at this size; 8 keeps it short
    demand = time_training_steps(model, list(model.parameters()), lambda: model(**batch)["loss"], 1, 2, 8 * SEQ)
    need = demand["tokens_per_s"]
    print(f"loader: BERT-base batch {BERT_BASE_BATCH} x {SEQ}, {steps} steps, {torch.get_num_threads()} torch threads")
    print(f"  in the loop        {loop:>12,.0f} tokens/s  = {loop / need:,.0f}x the demand")
    print(f"  2 prefetch threads {threaded:>12,.0f} tokens/s  = {threaded / need:,.0f}x the demand "
          f"({threaded / loop:.2f}x the loop)")
    print(f"  demand: BERT-base training step {need:,.0f} tokens/s ({demand['seconds_per_step']:.1f} s per "
          f"8 x {SEQ} step)")


def _ddp_worker(rank: int, world: int, port: int, steps: int, result_path: str) -> None:
    import torch
    import torch.distributed as dist

    from pretrain_step import _batch
    from training.models.bert.model import BertConfig, BertForPreTraining

    torch.set_num_threads(2 // world)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=8000, max_position_embeddings=512, **TINY))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    full = _batch(8000, batch=32)
    local = {k: v[rank * 32 // world:(rank + 1) * 32 // world] for k, v in full.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        model(**local)["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    if world > 1:
        dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - started
    if rank == 0:
        Path(result_path).write_text(str(steps * 32 * SEQ / seconds))
    if world > 1:
        dist.destroy_process_group()


def bench_ddp(root: Path, steps: int = 15) -> None:
    import torch.multiprocessing as mp

    rates = {}
    for world in (1, 2):
        out = root / f"ddp-{world}.txt"
        mp.start_processes(_ddp_worker, args=(world, 29517, steps, str(out)), nprocs=world, start_method="spawn")
        rates[world] = float(out.read_text())
    print(f"ddp (gloo, CPU): tiny shape, global batch 32 x {SEQ}, {steps} steps")
    print(f"  1 process x 2 threads  {rates[1]:>10,.0f} tokens/s")
    print(f"  2 processes x 1 thread {rates[2]:>10,.0f} tokens/s   efficiency {rates[2] / rates[1]:.2f}")


def bench_trainer(root: Path, steps: int = 20, rounds: int = 3) -> None:
    import torch

    from training.config import ModelConfig
    from training.pretrain_config import PretrainConfig
    from training.data import PretrainBatches
    from training.models.bert.model import BertForPreTraining
    from training.objectives import get_objective_spec
    from training.optim import build_scheduler, clip_gradients, optimizer_from_config
    from training.trainer import Trainer
    from training.trainer_settings import TrainerSettings

    shard_dir, tok_sha = _shards(root, rows=32 * 8, words=7995)
    batches = PretrainBatches.open(shard_dir, tok_sha, 32, seed=1)
    cfg = PretrainConfig(batch_size=32, max_steps=steps + 2, warmup_steps=2, log_every=10, learning_rate=1e-4)
    arch = ModelConfig(**TINY, max_position_embeddings=512).to_bert_config(8000, batches.pad_id)
    objective = get_objective_spec("mlm_nsp").loss

    def fresh():
        torch.manual_seed(0)
        model = BertForPreTraining(arch)
        optimizer = optimizer_from_config(model, cfg)
        return model, optimizer, build_scheduler(optimizer, cfg.warmup_steps, cfg.max_steps)

    def bare() -> float:
        model, optimizer, scheduler = fresh()
        model.train()
        for step in range(cfg.max_steps):
            if step == 2:
                started = time.perf_counter()
            out = objective(model, batches.batch(step))
            out["loss"].backward()
            clip_gradients(model, cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        return (time.perf_counter() - started) / steps

    def trainer() -> float:
        model, optimizer, scheduler = fresh()
        settings = TrainerSettings(max_steps=cfg.max_steps, metrics_path=root / "metrics.jsonl",
                                   max_grad_norm=cfg.max_grad_norm, log_every=cfg.log_every)
        t = Trainer(model, optimizer, scheduler, batches, objective, torch.device("cpu"), settings)
        t.train(stop_after=2)
        started = time.perf_counter()
        t.train()
        return (time.perf_counter() - started) / steps

    times = {"bare": [], "trainer": []}
    for _ in range(rounds):
        times["bare"].append(bare())
        times["trainer"].append(trainer())
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"trainer overhead: tiny shape, batch 32 x {SEQ}, {rounds} alternating rounds x {steps} steps, "
          f"{torch.get_num_threads()} threads")
    for k, v in times.items():
        print(f"  {k:<8} {med[k] * 1000:8.1f} ms/step  (rounds: {', '.join(f'{x * 1000:.1f}' for x in v)})")
    print(f"  overhead of the trainer: {(med['trainer'] / med['bare'] - 1) * 100:+.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["loader", "ddp", "trainer"])
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        for name, bench in (("loader", bench_loader), ("ddp", bench_ddp), ("trainer", bench_trainer)):
            if args.only in (None, name):
                (Path(tmp) / name).mkdir()
                bench(Path(tmp) / name)


if __name__ == "__main__":
    main()
