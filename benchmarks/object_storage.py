"""Object storage's overhead (issue 30, docs/cluster.md): the same work on local disk and on an S3 API server on this
machine (moto in server mode on 127.0.0.1, started here), so the ratios show what the storage layer costs, not a
network's bandwidth.

    python benchmarks/object_storage.py                      # both parts, the figures of benchmarks/RESULTS.md
    python benchmarks/object_storage.py --only loader --steps 16 --repeats 1     # a quick look

1. preprocess: `bertfactory preprocess --input FILES --format text --no-prefect --out DIR` vs `--out s3://...` (a
   fresh working copy each time: everything is uploaded), alternating, wall seconds per command (median);
   throughput ratio = local seconds / S3 seconds. Goal >= 0.8x.
2. loader: tokens/s of opening the train split and reading `--steps` batches of 32 x 128 (training/data.py
   PretrainBatches, configs/local.yaml's shape: 8,000-word vocabulary, full-length instances written through the
   real shard writer), from local disk, from S3 with an empty shard cache (cold: every shard downloaded and
   verified), and from S3 with the cache filled (warm). Goals: warm >= 0.95x local; cold >= 20x what the tiny
   twin's training step consumes (its tokens/s measured here, forward + backward + clip + AdamW).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "training"))  # make_run: synthetic shards through the real writer

CLI = str(Path(sys.executable).parent / "bertfactory")
SEQ, BATCH = 128, 32


def _env(server, work: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BERTFACTORY_WORK", "BERTFACTORY_SHARD"))}
    env.update(server.env, BERTFACTORY_WORK_ROOT=str(work), BERTFACTORY_SHARD_CACHE=str(cache))
    return env


def bench_preprocess(server, root: Path, files: int, repeats: int) -> dict:
    from bertfactory.samples import sample_path

    inputs = [str(p) for p in sorted(Path(sample_path("sotu")).rglob("*.txt"))[:files]]
    size = sum(Path(p).stat().st_size for p in inputs)
    bucket = server.make_bucket("bench-preprocess")
    seconds: dict[str, list[float]] = {"local": [], "s3": []}
    for r in range(repeats):
        for where in ("local", "s3"):
            out = str(root / f"local-{r}") if where == "local" else f"{bucket}/run-{r}"
            env = _env(server, root / f"work-{where}-{r}", root / f"cache-{where}-{r}")
            started = time.perf_counter()
            proc = subprocess.run([CLI, "preprocess", "--input", *inputs, "--format", "text", "--no-prefect",
                                   "--out", out], env=env, capture_output=True, text=True)
            seconds[where].append(time.perf_counter() - started)
            if proc.returncode != 0:
                raise SystemExit(f"preprocess --out {out} failed:\n{proc.stderr[-3000:]}")
    med = {k: statistics.median(v) for k, v in seconds.items()}
    print(f"preprocess: {len(inputs)} sotu files ({size / 2**20:.1f} MiB), --no-prefect, {repeats} alternating rounds")
    for k, v in seconds.items():
        print(f"  {k:<6} {med[k]:7.2f} s  (rounds: {', '.join(f'{x:.2f}' for x in v)})")
    ratio = med["local"] / med["s3"]
    print(f"  throughput S3 / local: {ratio:.2f}x (goal >= 0.8x)")
    return {"seconds": seconds, "ratio": ratio}


def _read(open_batches, steps: int) -> tuple[float, float, int]:
    """(seconds to open the split, seconds to read `steps` batches, tokens read)."""
    started = time.perf_counter()
    batches = open_batches()
    opened = time.perf_counter()
    tokens = sum(int(batches.batch(step)["attention_mask"].sum()) for step in range(steps))
    return opened - started, time.perf_counter() - opened, tokens


def bench_loader(server, root: Path, steps: int, repeats: int) -> dict:
    import torch
    from conftest import make_run

    from bertfactory import storage
    from bertfactory.io import sha256_file
    from pretrain_step import SHAPES, _batch, time_training_steps
    from training.data import PretrainBatches
    from training.models.bert import BertConfig, BertForPreTraining

    run = make_run(root / "loader-run", train_rows=BATCH * steps, heldout_rows=8, words=7995, variants=2,
                   max_seq_len=SEQ, min_seq_len=SEQ, shards=8)
    tok_sha = sha256_file(run / "tokenizer" / "tokenizer.json")
    bucket = server.make_bucket("bench-loader")
    url = f"{bucket}/run/shards"
    server.apply()
    try:
        for path in sorted((run / "shards").rglob("*")):
            if path.is_file():
                storage.upload_file(path, storage.join(url, path.relative_to(run / "shards").as_posix()))
        shard_bytes = sum(p.stat().st_size for p in (run / "shards").rglob("*.arrow"))
        times: dict[str, list[float]] = {"local": [], "s3 cold": [], "s3 warm": []}
        opens: dict[str, list[float]] = {k: [] for k in times}
        tokens = 0
        for r in range(repeats):
            cache = root / f"loader-cache-{r}"
            os.environ["BERTFACTORY_SHARD_CACHE"] = str(cache)
            for name, source in (("local", run / "shards"), ("s3 cold", url), ("s3 warm", url)):
                open_s, read_s, tokens = _read(lambda: PretrainBatches.open(source, tok_sha, BATCH, seed=1), steps)
                opens[name].append(open_s)
                times[name].append(open_s + read_s)
            shutil.rmtree(cache, ignore_errors=True)
    finally:
        server.restore()
        os.environ.pop("BERTFACTORY_SHARD_CACHE", None)
    rate = {k: tokens / statistics.median(v) for k, v in times.items()}
    steady = {k: tokens / statistics.median([t - o for t, o in zip(times[k], opens[k])]) for k in times}

    hidden, layers, heads, inter, vocab = SHAPES["tiny"]
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads,
                                          intermediate_size=inter, max_position_embeddings=512))
    batch = _batch(vocab, batch=BATCH)
    need = time_training_steps(model, list(model.parameters()), lambda: model(**batch)["loss"], 2, 8,
                               BATCH * SEQ)["tokens_per_s"]
    print(f"loader: open the train split + {steps} batches of {BATCH} x {SEQ} ({tokens:,} tokens, 8 shards, "
          f"{shard_bytes / 2**20:.1f} MiB), {repeats} rounds, {torch.get_num_threads()} torch threads")
    print("  open + read (tokens over the whole time, the open's downloads included):")
    for k in times:
        print(f"    {k:<8} {rate[k]:>12,.0f} tokens/s  ({rate[k] / rate['local']:.2f}x local, {rate[k] / need:,.0f}x the "
              f"tiny step)  open {statistics.median(opens[k]) * 1000:6.1f} ms  (rounds s: "
              f"{', '.join(f'{x:.3f}' for x in times[k])})")
    print("  read after the open (the loader in a training run's steady state):")
    for k in times:
        print(f"    {k:<8} {steady[k]:>12,.0f} tokens/s  ({steady[k] / steady['local']:.2f}x local)")
    print(f"  demand: the tiny twin's training step {need:,.0f} tokens/s (batch {BATCH} x {SEQ})")
    print(f"  warm / local: {steady['s3 warm'] / steady['local']:.2f}x read, {rate['s3 warm'] / rate['local']:.2f}x open "
          f"+ read (goal >= 0.95x); cold / tiny step {rate['s3 cold'] / need:,.0f}x open + read (goal >= 20x)")
    return {"tokens_per_s": rate, "steady_tokens_per_s": steady, "demand": need}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("preprocess", "loader"))
    parser.add_argument("--files", type=int, default=60, help="sotu files to preprocess (default 60)")
    parser.add_argument("--steps", type=int, default=64, help="loader batches (default 64)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from tests.storage_servers import start_s3

    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; S3 API: moto server on 127.0.0.1 (same machine)")
    server = start_s3()
    root = Path(tempfile.mkdtemp(prefix="bench-object-storage-"))
    try:
        if args.only in (None, "preprocess"):
            bench_preprocess(server, root, args.files, args.repeats)
        if args.only in (None, "loader"):
            bench_loader(server, root, args.steps, args.repeats)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
