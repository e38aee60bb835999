"""configs/tapt-minilm.yaml end to end at a reduced size, as a user runs it: `bertfactory run` through Prefect
(tapt -> preprocess -> pretrain -> evaluate) on the real MiniLM and the real trec_coarse sample, a few pretraining
steps and a small fine-tuning; then the same command without Prefect finds every stage up to date. The full size is
measured in benchmarks/RESULTS.md ("TAPT of MiniLM (issue 18)")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from bertfactory.samples import is_fetched, sample_dir, sample_path

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "configs" / "tapt-minilm.yaml"

pytestmark = pytest.mark.skipif(not (is_fetched("minilm") and is_fetched("trec")),
                                reason="needs `bertfactory samples fetch minilm trec`")

# the recipe's own model (MiniLM's shape: init_from requires it) on one task's text: a head warm-up of 2 steps
# (encoder frozen), then 2 % of an epoch (a few steps), one small fine-tuning
REDUCED = ["tapt.tasks=[trec_coarse]", "evaluate.tasks={trec_coarse: {}}", "preprocess.runner.preset=in_process",
           "preprocess.instances.max_seq_len=64", "tapt.head_warmup_steps=2", "tapt.epochs=0.02",
           "pretrain.batch_size=8", "pretrain.warmup_steps=1", "pretrain.log_every=1", "pretrain.save_every=2",
           "pretrain.keep_last=5",
           "evaluate.intrinsic.enabled=false", "evaluate.objective.enabled=false", "evaluate.baselines=[majority]",
           "evaluate.finetune.num_seeds=1", "evaluate.finetune.max_train_examples=32",
           "evaluate.finetune.max_eval_examples=16", "evaluate.finetune.epochs=1", "evaluate.finetune.batch_size=16",
           "evaluate.finetune.max_seq_len=24"]


def _bertfactory(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "bertfactory"
    sets = [a for o in REDUCED for a in ("--set", o)]
    proc = subprocess.run([str(script), *args, *sets], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def test_tapt_minilm_recipe_runs_as_one_flow(tmp_path):
    run = tmp_path / "run"
    minilm = sample_path("minilm")
    proc = _bertfactory("run", str(RECIPE), "--run-dir", str(run))
    logs = proc.stdout + proc.stderr
    for stage in ("tapt", "preprocess", "pretrain", "evaluate"):
        assert any(line.split()[:2] == [stage, "ran"] for line in proc.stdout.splitlines()), stage

    # tapt: the unadapted import and the task's training texts, labels dropped
    corpus = [json.loads(x) for x in (run / "tapt" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(corpus) == 4325 and all(d["id"].startswith("trec_coarse/") and set(d) == {"id", "text", "lang"}
                                       for d in corpus)
    assert (run / "tapt" / "unadapted" / "model.safetensors").is_file()

    # preprocess: MiniLM's own vocabulary, without the file's padding to 128 tokens
    adopted = json.loads((run / "tokenizer" / "tokenizer.json").read_text())
    assert adopted["padding"] is None and adopted["truncation"] is None
    ours = Tokenizer.from_file(str(run / "tokenizer" / "tokenizer.json")).get_vocab(with_added_tokens=True)
    assert ours == Tokenizer.from_file(str(minilm / "tokenizer.json")).get_vocab(with_added_tokens=True)

    # pretrain: from MiniLM's encoder, the MLM head fresh and said so
    assert f"MLM head initialised fresh: not in {minilm}" in logs
    final = load_file(str(run / "pretrain" / "final" / "model.safetensors"))
    start = load_file(str(minilm / "model.safetensors"))
    word = "embeddings.word_embeddings.weight"
    # the head warm-up: 2 steps with MiniLM's encoder frozen (its bytes, the tied decoder's too; the head training
    # is tests/training/test_freeze.py's), then tapt.epochs of the shards' train rows
    assert "head warm-up: the encoder" in logs and "head warm-up over" in logs
    warmed = load_file(str(run / "pretrain" / "checkpoints" / "step-2" / "model.safetensors"))
    assert torch.equal(warmed[f"bert.{word}"], start[word])
    unadapted = load_file(str(run / "tapt" / "unadapted" / "model.safetensors"))  # MiniLM under our names
    encoder = [k for k in unadapted if k.startswith("bert.") and not k.startswith("bert.pooler.")]
    assert len(encoder) > 90 and all(torch.equal(warmed[k], unadapted[k]) for k in encoder)
    rows = json.loads((run / "shards" / "manifest.json").read_text())["splits"]["train"]["rows"]
    steps = [json.loads(x)["step"] for x in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 2 + -(-2 * (rows // 8) // 100) and steps[-1] > 2
    trained, loaded = final[f"bert.{word}"].double().flatten(), start[word].double().flatten()
    assert torch.nn.functional.cosine_similarity(trained, loaded, dim=0) > 0.99  # from MiniLM: a random init is ~0
    assert not torch.equal(trained, loaded)  # and trained
    assert json.loads((run / "pretrain" / "final" / "config.json").read_text())["model"]["hidden_size"] == 384

    # evaluate: the adapted model and the unadapted MiniLM fine-tuned alike
    task = json.loads((run / "eval" / "results.json").read_text())["tasks"]["trec_coarse"]
    assert task["pretrained"]["seeds"] == [12345] and 0.0 <= task["pretrained"]["accuracy"] <= 1.0
    assert set(task["compared"]) == {"unadapted"} and 0.0 <= task["compared"]["unadapted"]["accuracy"] <= 1.0

    # the shards' manifest names the task corpus inside the run directory as RUN/..., not this machine's path
    manifest = json.loads((run / "shards" / "manifest.json").read_text())
    assert [s["path"] for s in manifest["sources"]] == ["RUN/tapt/corpus.jsonl"]

    # the run directory moved, the same command without Prefect: every stage's key is the same, nothing runs again
    moved = tmp_path / "elsewhere" / "run"
    moved.parent.mkdir()
    run.rename(moved)
    again = _bertfactory("run", str(RECIPE), "--run-dir", str(moved), "--no-prefect")
    for stage in ("tapt", "preprocess", "pretrain", "evaluate"):
        assert any(line.split()[:2] == [stage, "up-to-date"] for line in again.stdout.splitlines()), again.stdout


@pytest.mark.slow
def test_tapt_minilm_recipe_on_a_bucket_then_up_to_date_from_another_machine(tmp_path):
    """The same recipe with its run directory on S3 (moto on 127.0.0.1): every stage's outputs and stamps reach the
    bucket, and another machine finds all four stages up to date from the bucket alone, though its working copies
    and its samples cache lie elsewhere (the keys name RUN/... and SAMPLES/..., not a machine's paths:
    bertfactory/portable_paths.py)."""
    from tests.flows.test_object_storage import machine, remote_files
    from tests.storage_servers import start_s3

    server = start_s3()
    try:
        url = f"{server.make_bucket('tapt')}/run"
        script = str(Path(sys.executable).parent / "bertfactory")
        sets = [a for o in REDUCED for a in ("--set", o)]
        cache_b = tmp_path / "b" / "home" / "cache"
        for sample in ("minilm", "trec"):  # machine b's own copy of the samples (hard links: same bytes, no space)
            (cache_b / "samples").mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-al", str(sample_dir(sample)), str(cache_b / "samples" / sample)], check=True)
        for name, expected, extra in (("a", "ran", {}), ("b", "up-to-date", {"BERTFACTORY_CACHE": str(cache_b)})):
            env = {**machine(tmp_path, name, server, **extra), "OMP_NUM_THREADS": "2"}
            proc = subprocess.run([script, "run", str(RECIPE), "--run-dir", url, "--no-prefect", *sets],
                                  capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
            assert proc.returncode == 0, f"machine {name} exited {proc.returncode}:\n{proc.stderr[-6000:]}"
            for stage in ("tapt", "preprocess", "pretrain", "evaluate"):
                assert any(line.split()[:2] == [stage, expected] for line in proc.stdout.splitlines()), \
                    (name, stage, proc.stdout[-3000:])
        stamps = remote_files(server, f"{url}/.bertfactory")
        assert {f"{stage}.json" for stage in ("tapt", "preprocess", "pretrain", "evaluate")} <= set(stamps)
        tapt = remote_files(server, f"{url}/tapt")
        assert "unadapted/model.safetensors" in tapt and "corpus.jsonl" in tapt
        results = json.loads(remote_files(server, f"{url}/eval")["results.json"])
        assert set(results["tasks"]["trec_coarse"]["compared"]) == {"unadapted"}
    finally:
        server.stop()


@pytest.mark.slow
def test_tapt_recipe_on_a_bucket_preprocessed_by_workers_that_share_no_disk(tmp_path):
    """The recipe on S3 with its preprocessing on the portable runner's worker pool, a machine of its own (own HOME,
    TMPDIR and working directory: preprocessing.portable_local's `isolate`): the task corpus the tapt stage wrote
    into the driver's working copy is read by the workers at its URL in the run location, where the tapt stage
    pushed it (a cluster preset refused it as a local input file before)."""
    from preprocessing.portable_local import local_portable_cluster
    from tests.flows.test_object_storage import machine, remote_files
    from tests.storage_servers import start_s3

    server = start_s3()
    saved = dict(os.environ)
    try:
        url = f"{server.make_bucket('tapt-cluster')}/run"
        os.environ.update(server.env)  # the pool's workers reach the bucket the standard way
        with local_portable_cluster(pools=1, log_dir=tmp_path / "logs", isolate=tmp_path / "pool") as cluster:
            runner = cluster.runner_config().model_dump(mode="json", include={"preset", "num_workers", "portable"})
            sets = [a for o in [*REDUCED, f"preprocess.runner={json.dumps(runner)}"] for a in ("--set", o)]
            proc = subprocess.run([str(Path(sys.executable).parent / "bertfactory"), "run", str(RECIPE), "--run-dir",
                                   url, "--no-prefect", *sets], capture_output=True, text=True, timeout=900,
                                  cwd=REPO, env={**machine(tmp_path, "driver", server), "OMP_NUM_THREADS": "2"})
            started = cluster.workers_started()
        logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted((tmp_path / "logs").glob("*.log")))
        assert proc.returncode == 0, f"exited {proc.returncode}:\n{proc.stderr[-6000:]}\n{logs}"
        assert "exchange their files through" in proc.stderr and started and min(started) >= 1, (started, logs)
        for stage in ("tapt", "preprocess", "pretrain", "evaluate"):
            assert any(line.split()[:2] == [stage, "ran"] for line in proc.stdout.splitlines()), stage
        manifest = json.loads(remote_files(server, f"{url}/shards")["manifest.json"])
        assert manifest["runner"]["runner"] == "PortableRunner"
        assert [s["path"] for s in manifest["sources"]] == ["RUN/tapt/corpus.jsonl"]
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()
