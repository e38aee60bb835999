"""The whole pipeline through the CLI on the real Wikipedia sample (tiny sizes): every contract file appears and
reads back through its reader, a rerun skips every stage, and a config change reruns exactly the stages
downstream of the section that changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertfactory.samples import sample_path
from flows.artifacts import stage_markdown
from flows.cli import main

REPO = Path(__file__).resolve().parents[2]
LOCAL = str(REPO / "configs" / "local.yaml")
pytestmark = pytest.mark.slow  # the whole pipeline, four times

# Small enough for CI, large enough that every stage does its real work. Evaluation: one task, one seed, no
# feature-based table (the other tasks, seeds and the feature-based table through the evaluate stage are
# tests/evaluation/test_run.py's; here the pipeline's caching and contracts are under test).
TINY = [
    "preprocess.tokenizer.vocab_size=2000",
    "preprocess.instances.dupe_factor=1",
    "preprocess.masking.variants=2",
    "model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
    "pretrain.max_steps=20", "pretrain.batch_size=8", "pretrain.warmup_steps=2",
    "pretrain.log_every=5", "pretrain.save_every=10",
    "evaluate.intrinsic.max_batches=4", "evaluate.intrinsic.pseudo_perplexity_instances=4",
    "evaluate.tasks={movie_sentiment: {}}", "evaluate.feature_based.enabled=false",
    "evaluate.finetune.num_seeds=1", "evaluate.finetune.max_train_examples=300",
    "evaluate.finetune.max_eval_examples=200", "evaluate.finetune.epochs=1",
    "evaluate.finetune.batch_size=16", "evaluate.finetune.max_seq_len=32",
]


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def bertfactory(*args: str) -> str:
    """Run the installed `bertfactory` command as a user would (its own process, so Prefect's global logging
    and ephemeral server are set up as in real use); returns stdout, fails with stderr on a non-zero exit."""
    script = Path(sys.executable).parent / "bertfactory"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "flows.cli"]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, f"bertfactory {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-5000:]}"
    return proc.stdout


def _statuses(output: str) -> dict[str, str]:
    """The per-stage lines the CLI prints before the summary table: `<stage> <status> <seconds> s`."""
    out = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] in ("preprocess", "pretrain", "evaluate") and parts[3] == "s":
            out[parts[0]] = parts[1]
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    sample_path("enwiki")  # a clear "run bertfactory samples fetch" error instead of a pipeline failure
    sample_path("movie_reviews")
    return tmp_path_factory.mktemp("pipeline") / "run"


def test_run_writes_every_contract_file_and_a_summary(run_dir):
    out = bertfactory("run", LOCAL, "--run-dir", str(run_dir), *_sets(TINY))
    assert _statuses(out) == {"preprocess": "ran", "pretrain": "ran", "evaluate": "ran"}
    for rel in ("tokenizer/tokenizer.json", "shards/manifest.json", "pretrain/metrics.jsonl",
                "pretrain/final/model.safetensors", "pretrain/final/config.json", "pretrain/final/tokenizer.json",
                "eval/results.json", "eval/report.md"):
        assert (run_dir / rel).is_file(), rel
    assert list((run_dir / "shards/train").glob("part-*.arrow")) and list((run_dir / "shards/heldout").glob("part-*.arrow"))

    # each contract reads back through its own validating reader
    from evaluation.results import read_results
    from preprocessing.shards import read_manifest
    from training.checkpoint import load_pretrained

    manifest = read_manifest(run_dir / "shards")
    assert manifest.mask_variants == 2
    assert manifest.runner["runner"] == "FnApiRunner" and manifest.runner["direct_running_mode"] == "multi_processing"
    results = read_results(run_dir / "eval")
    assert 0.0 <= results["intrinsic"]["mlm_accuracy"] <= 1.0
    sentiment = results["tasks"]["movie_sentiment"]
    assert {"pretrained", "random_init", "majority"} <= set(sentiment)
    model, config, _ = load_pretrained(run_dir / "pretrain/final")
    assert config.hidden_size == 32 and config.vocab_size == manifest.tokenizer.vocab_size
    steps = [json.loads(line)["step"] for line in (run_dir / "pretrain/metrics.jsonl").read_text().splitlines()]
    assert steps == [5, 10, 15, 20]

    # the printed summary table has a row for every stage
    for label in ("documents kept / read", "final mlm_loss", "held-out mlm accuracy",
                  "movie_sentiment accuracy · random_init"):
        assert label in out
    # artifacts are made from the contract files
    md = stage_markdown("evaluate", run_dir, {"status": "ran", "key": "k" * 64, "seconds": 1.0})
    assert "movie_sentiment · pretrained accuracy" in md


def test_rerun_skips_every_stage(run_dir):
    before = (run_dir / "pretrain/final/model.safetensors").stat().st_mtime_ns
    out = bertfactory("run", LOCAL, "--run-dir", str(run_dir), *_sets(TINY))
    assert _statuses(out) == {s: "up-to-date" for s in ("preprocess", "pretrain", "evaluate")}
    assert (run_dir / "pretrain/final/model.safetensors").stat().st_mtime_ns == before


def test_an_evaluate_change_reruns_only_evaluate(run_dir):
    out = bertfactory("run", LOCAL, "--run-dir", str(run_dir), "--no-prefect",
                      *_sets(TINY + ["evaluate.intrinsic.max_batches=2"]))
    assert _statuses(out) == {"preprocess": "up-to-date", "pretrain": "up-to-date", "evaluate": "ran"}


def test_a_masking_change_reruns_from_preprocessing(run_dir):
    changed = TINY + ["evaluate.intrinsic.max_batches=2", "preprocess.masking.variants=3"]
    out = bertfactory("run", LOCAL, "--run-dir", str(run_dir), *_sets(changed))
    assert _statuses(out) == {"preprocess": "ran", "pretrain": "ran", "evaluate": "ran"}
    from preprocessing.shards import read_manifest

    assert read_manifest(run_dir / "shards").mask_variants == 3


def test_inspect_decodes_an_instance_with_its_masks(run_dir, capsys):
    assert main(["inspect", str(run_dir), "--split", "heldout", "--index", "1", "--variant", "2"]) == 0
    out = capsys.readouterr().out
    assert "[CLS]" in out and "[SEP]" in out and "[MASK]" in out
    assert "heldout" in out
