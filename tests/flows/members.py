"""Running a member's tiny twin end to end as a user runs it (tests/flows/test_members_*.py): `bertfactory run
configs/tiny-<member>.yaml` through Prefect (preprocess -> pretrain -> evaluate) on the real samples, at reduced
sizes, and then its pretrain stage under `torchrun --nproc_per_node 2 $(which bertfactory) pretrain ...
--no-prefect` on the same shards (gloo on the CPU),
the command the pretrain-gpu deployment runs with --nproc_per_node=gpu.

What the evaluate stage must report for each: the member's own held-out metric (MLM / SBO / RTD / PLM / CLM,
evaluation/heldout.py) next to its no-context baseline, and a fine-tuned task from the member's backbone. The
quality of the full-length tiny twins (the loss well below the baseline) is measured in docs/family.md's table;
here the runs are minutes of CI, so only that everything runs, connects and is reported is under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from bertfactory.samples import sample_path

REPO = Path(__file__).resolve().parents[2]

# the twin's own recipe, shrunk: a small tokenizer and model, a few steps, one small fine-tuning task
PREPROCESS = ["preprocess.tokenizer.vocab_size=1500", "preprocess.runner.preset=in_process"]
TRAIN = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
         "pretrain.max_steps=8", "pretrain.batch_size=8", "pretrain.warmup_steps=2", "pretrain.log_every=4",
         "pretrain.save_every=4", "pretrain.grad_accumulation=1"]
EVALUATE = ["evaluate.intrinsic.max_batches=2", "evaluate.objective.max_batches=2",
            "evaluate.feature_based.enabled=false", "evaluate.tasks={movie_sentiment: {}}",
            "evaluate.random_init_baseline=false", "evaluate.baselines=[majority]",
            "evaluate.finetune.num_seeds=1", "evaluate.finetune.max_train_examples=64",
            "evaluate.finetune.max_eval_examples=32", "evaluate.finetune.epochs=1", "evaluate.finetune.batch_size=16",
            "evaluate.finetune.max_seq_len=32"]


def _fewer_instances(recipe: Path) -> list[str]:
    """Each document once and one mask variant where the twin has more: its 8 steps read 64 instances, and 5
    duplicates x 4 variants made the instance stage ~28 of a twin's ~67 s (the shipped sizes run in
    tests/flows/test_tiny_recipes.py)."""
    pre = (yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}).get("preprocess") or {}
    instances, masking = pre.get("instances") or {}, pre.get("masking") or {}
    return ((["preprocess.instances.dupe_factor=1"] if instances.get("dupe_factor", 1) > 1 else [])
            + (["preprocess.masking.variants=1"] if masking.get("variants", 1) > 1 else []))


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def _command(*args: str, launcher: list[str] | None = None, timeout: int = 900) -> str:
    script = Path(sys.executable).parent / "bertfactory"
    proc = subprocess.run([*(launcher or []), str(script), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, (f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                                  f"{proc.stderr[-6000:]}")
    return proc.stdout


def run_twin_through_flow_and_torchrun(twin: str, metric: str, finetune: bool = True, *, tmp_path: Path) -> None:
    """`finetune` False: a member with no bidirectional encoder to fine-tune (Transformer-XL, a causal LM) is
    evaluated on its objective alone."""
    recipe = str(REPO / "configs" / twin)
    sample_path("movie_reviews")
    run = tmp_path / "run"
    evaluate = EVALUATE if finetune else [o for o in EVALUATE if not o.startswith("evaluate.tasks=")] + [
        "evaluate.tasks={}"]
    _command("run", recipe, "--run-dir", str(run),
             *_sets(PREPROCESS + _fewer_instances(Path(recipe)) + TRAIN + evaluate))

    results = json.loads((run / "eval" / "results.json").read_text())
    head = results["objective"]["headline"]
    assert head["metric"] == metric and head["baseline_name"]
    assert 0 < head["value"] < 50 and 0 < head["baseline"] < 50, head
    if finetune:
        assert results["tasks"]["movie_sentiment"]["pretrained"]["runs"], "the backbone was fine-tuned"
    metrics = [json.loads(x) for x in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [4, 8]

    # the same pretraining on the same shards in 2 processes, as torchrun launches it
    ddp = tmp_path / "ddp"
    ddp.mkdir()
    for part in ("tokenizer", "shards", *[p.name for p in run.iterdir() if p.name.startswith("tlm")]):
        shutil.copytree(run / part, ddp / part)
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master-port",
                str(_free_port())]
    _command("pretrain", recipe, "--run-dir", str(ddp), "--no-prefect", *_sets(TRAIN), launcher=torchrun)
    summary = json.loads((ddp / "pretrain" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 8
    assert (ddp / "pretrain" / "final" / "model.safetensors").is_file()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
