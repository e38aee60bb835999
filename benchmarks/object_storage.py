"""Object storage's overhead (issue 30, docs/cluster.md): the same work on local disk and on an S3 API server on this
machine (moto in server mode on 127.0.0.1, started here), so the ratios show what the storage layer costs, not a
network's bandwidth.

    python benchmarks/object_storage.py                      # both parts, the figures of benchmarks/RESULTS.md
    python benchmarks/object_storage.py --only loader --steps 16 --repeats 1     # a quick look
    python benchmarks/object_storage.py --only exchange --copies 10 --repeats 1  # workers through the bucket

1. preprocess: `bertfactory preprocess --input FILES --format text --no-prefect --out DIR` vs `--out s3://...` (a
   fresh working copy each time: everything is uploaded), alternating, wall seconds per command (median);
   throughput ratio = local seconds / S3 seconds. Goal >= 0.8x.
2. loader: tokens/s of opening the train split and reading `--steps` batches of 32 x 128 (training/data.py
   PretrainBatches, configs/local.yaml's shape: 8,000-word vocabulary, full-length instances written through the
   real shard writer), from local disk, from S3 with an empty shard cache (cold: every shard downloaded and
   verified), and from S3 with the cache filled (warm). Goals: warm >= 0.95x local; cold >= 20x what the tiny
   twin's training step consumes (its tokens/s measured here, forward + backward + clip + AdamW).
3. exchange: the preprocessing job with its workers handing each other every file through the bucket
   (preprocess.runner.exchange bucket: what a Dataflow / Flink / Spark job does, docs/cluster.md), inputs read from
   the bucket too, against the same job on local disk, at 1x and `--copies` x sotu (each copy's files renamed,
   dedup off, the tokenizer given), both setups of benchmarks/RESULTS.md's memory and equal-work figures:
   `local.yaml` (NSP pairs, dupe_factor 5, 4 mask variants; the local preset's 2 workers) and `raw tokens`
   (corpus.documents raw, full-sentences packed by tokens, dynamic masks: HF run_mlm's work, the default runner's
   choice), the latter with HF datasets' map + group_texts (benchmarks/corpus_throughput.py) in the same run for the
   equal-work ratio. Wall seconds of the whole `bertfactory preprocess --no-prefect` command (uploads and the
   publication included) and the peak RSS summed over its process tree (driver + Beam workers; the S3 server's own
   memory is reported apart: it holds every object in memory).
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


EXCHANGE_SETUPS = {
    "local.yaml": ["corpus.dedup.exact=false", "corpus.dedup.near=false"],
    "raw tokens": ["corpus.documents=raw", "preprocess.instances.format=full-sentences",
                   "preprocess.instances.packing=tokens", "preprocess.masking.dynamic=true"],
}


HF = "hf datasets (local files)"


def _measured(cmd: list[str], env: dict) -> dict:
    """Run `cmd`; its wall seconds and the peak RSS summed over its process tree (corpus_throughput's sampler)."""
    from corpus_throughput import TreeRssSampler

    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = TreeRssSampler(proc.pid)
    sampler.start()
    _, stderr = proc.communicate()
    sampler.done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed:\n{stderr[-3000:]}")
    return {"wall_s": time.perf_counter() - started, "peak_tree_mib": sampler.peak_sum_kib / 1024}


def _server_rss_mib(server) -> float:
    from corpus_throughput import _status_kib

    return _status_kib(server.process.pid, "VmHWM") / 1024


def _copies(root: Path, n: int, files: int | None) -> Path:
    """n renamed copies of sotu (corpus_throughput.copies_dir), each cut to its first `files` addresses."""
    from corpus_throughput import copies_dir

    directory = copies_dir(root, n)
    if files:
        keep = sorted(f.name.split("_", 1)[1] for f in directory.glob("copy00_*"))[:files]
        for f in directory.iterdir():
            if f.name.split("_", 1)[1] not in keep:
                f.unlink()
    return directory


def bench_exchange(server, root: Path, copies: int, repeats: int, files: int | None = None) -> dict:
    from bertfactory import storage
    from corpus_throughput import in_subprocess

    tokenizer_run = root / "exchange-tokenizer"
    first = _measured([CLI, "preprocess", "--input", str(_copies(root, 1, files)), "--format",
                       "text", "--no-prefect", "--out", str(tokenizer_run)], _env(server, root / "w0", root / "c0"))
    tokenizer = str(tokenizer_run / "tokenizer" / "tokenizer.json")
    print(f"exchange: tokenizer trained once on 1x (not compared, {first['wall_s']:.1f} s); {repeats} round(s), "
          "alternating")
    bucket = server.make_bucket("bench-exchange")
    results: dict = {}
    for n in sorted({1, copies}):
        inputs = _copies(root, n, files)
        server.apply()
        try:
            for f in sorted(inputs.iterdir()):
                storage.upload_file(f, storage.join(bucket, f"input_{n}x", f.name))
        finally:
            server.restore()
        size = sum(f.stat().st_size for f in inputs.iterdir())
        for setup, overrides in EXCHANGE_SETUPS.items():
            sets = [a for o in [*overrides, f"preprocess.tokenizer.path={tokenizer}"] for a in ("--set", o)]
            runs: dict[str, list[dict]] = {"local disk": [], "s3, workers through the bucket": []}
            for r in range(repeats):
                env = _env(server, root / f"w-{n}-{r}", root / f"c-{n}-{r}")
                runs["local disk"].append(_measured(
                    [CLI, "preprocess", "--input", str(inputs), "--format", "text", "--no-prefect", "--out",
                     str(root / f"ex-local-{n}-{r}"), *sets], env))
                shutil.rmtree(root / f"ex-local-{n}-{r}")
                runs["s3, workers through the bucket"].append(_measured(
                    [CLI, "preprocess", "--input", f"{bucket}/input_{n}x/*.txt", "--format", "text", "--no-prefect",
                     "--out", f"{bucket}/ex-{setup.replace(' ', '-').replace('.', '-')}-{n}-{r}", *sets,
                     "--set", "preprocess.runner.exchange=bucket"], env))
                shutil.rmtree(root / f"w-{n}-{r}", ignore_errors=True)
                if setup == "raw tokens":  # timed as a whole process too (imports included), like our command
                    started = time.perf_counter()
                    hf = in_subprocess("hf", {"work": str(root), "tokenizer": tokenizer, "input_dir": str(inputs)})
                    runs.setdefault(HF, []).append({"wall_s": time.perf_counter() - started,
                                                    "peak_tree_mib": hf["peak_tree_rss_mib"]})
            med = {k: {m: statistics.median(x[m] for x in v) for m in ("wall_s", "peak_tree_mib")}
                   for k, v in runs.items()}
            results[(n, setup)] = med
            print(f"  {n}x sotu ({size / 2**20:.1f} MiB), {setup}:")
            for k, v in med.items():
                ratios = []
                if k not in ("local disk", HF):
                    ratios.append(f"throughput vs local disk {med['local disk']['wall_s'] / v['wall_s']:.2f}x")
                if HF in med and k != HF:
                    ratios.append(f"vs hf {med[HF]['wall_s'] / v['wall_s']:.2f}x")
                extra = f"  {', '.join(ratios)}" if ratios else ""
                rounds = ", ".join(f"{x['wall_s']:.1f}" for x in runs[k])
                print(f"    {k:<32} {v['wall_s']:7.1f} s  peak tree RSS {v['peak_tree_mib']:7,.0f} MiB{extra}  "
                      f"(rounds s: {rounds})")
        shutil.rmtree(inputs)
    print(f"  the S3 server's own peak RSS (every object in its memory): {_server_rss_mib(server):,.0f} MiB")
    return results


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
    from training.models.bert.model import BertConfig, BertForPreTraining

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
    parser.add_argument("--only", choices=("preprocess", "loader", "exchange"))
    parser.add_argument("--copies", type=int, default=10, help="exchange: copies of sotu of the large run (default 10)")
    parser.add_argument("--exchange-files", type=int, default=None,
                        help="exchange: only this many sotu addresses per copy (default all 233)")
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
        if args.only in (None, "exchange"):
            bench_exchange(server, root, args.copies, 1 if args.only is None else args.repeats, args.exchange_files)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
