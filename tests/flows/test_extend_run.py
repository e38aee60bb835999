"""A changed setting never deletes finished work (issue 35): a raised pretrain.max_steps extends the run from its
last checkpoint to the weights of a straight run of that length; logging, tracking and checkpoint cadence never
restart it; a change that alters trained steps is refused with one line, and with --force the old outputs are moved
aside; nothing under the run directory is removed except by `bertfactory clean`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from bertfactory.samples import sample_path
from flows.cli import main

SOTU = ("1790_george_washington_n.txt", "1791_george_washington_n.txt", "1792_george_washington_n.txt")
PRETRAIN = {"device": "cpu", "seed": 1, "batch_size": 2, "max_steps": 12, "warmup_steps": 2, "schedule": "wsd",
            "wsd_decay_fraction": 0.1, "log_every": 5, "save_every": 5, "keep_last": 5, "num_threads": 1}


@pytest.fixture(scope="module")
def preprocessed(tmp_path_factory):
    """A recipe and a run directory holding its preprocessing only (copied for each test)."""
    root = tmp_path_factory.mktemp("extend")
    recipe = root / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({  # tests/flows/conftest.py's tiny recipe (a function-scoped fixture there)
        "name": "extend-test",
        "corpus": {"inputs": [str(sample_path("sotu") / n) for n in SOTU], "format": "text", "lang": "en",
                   "min_doc_chars": 100},
        "preprocess": {
            "seed": 3, "heldout_fraction": 0.0, "runner": {"preset": "in_process"},
            "tokenizer": {"vocab_size": 300, "min_frequency": 2, "limit_alphabet": 60},
            "instances": {"max_seq_len": 32, "dupe_factor": 1}, "masking": {"variants": 1},
            "shards": {"train_shards": 1, "heldout_shards": 1},
        },
        "model": {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "intermediate_size": 32,
                  "max_position_embeddings": 32},
        "pretrain": PRETRAIN,
    }), encoding="utf-8")
    run = root / "base"
    assert main(["preprocess", str(recipe), "--run-dir", str(run), "--no-prefect"]) == 0
    return recipe, run


def _copy(preprocessed, tmp_path) -> tuple[str, Path]:
    recipe, base = preprocessed
    run = tmp_path / "run"
    shutil.copytree(base, run)
    return str(recipe), run


def _files(run: Path) -> set[str]:
    return {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()}


def _still_there(before: set[str], run: Path) -> list[str]:
    """Files of `before` that are neither where they were nor at the same place inside a replaced folder."""
    after = _files(run)
    aside = {_untagged(f) for f in after if ".replaced-" in f}
    return sorted(f for f in before if f not in after and _untagged(f) not in aside)


def _untagged(path: str) -> str:
    """pretrain.replaced-<time>-<key>/final.replaced-<time>-step12/x -> pretrain/final/x"""
    return "/".join(part.split(".replaced-")[0] for part in path.split("/"))


def _weights(run: Path, rel: str = "pretrain/final") -> dict[str, torch.Tensor]:
    return load_file(str(run / rel / "model.safetensors"))


def _pretrain(recipe, run, *extra) -> int:
    return main(["pretrain", recipe, "--run-dir", str(run), "--no-prefect", *extra])


def test_extending_12_to_20_steps_gives_the_straight_20_step_weights(preprocessed, tmp_path, capsys, caplog):
    recipe, run = _copy(preprocessed, tmp_path)
    assert _pretrain(recipe, run) == 0
    # every 5 steps, and step 11: where the wsd decay starts, the last step any longer run shares
    assert sorted(p.name for p in (run / "pretrain/checkpoints").iterdir()) == ["step-10", "step-11", "step-5"]
    twelve = _weights(run)
    before = _files(run)
    caplog.clear()
    assert _pretrain(recipe, run, "--set", "pretrain.max_steps=20") == 0
    log = caplog.text
    assert "removing" not in log and "extending the run from its checkpoint at step 11" in log, log
    assert "resuming from step 11" in log, log
    # the 12-step model is kept beside the new one, and no file of the 12-step run is gone
    kept = [p for p in (run / "pretrain").iterdir() if p.name.startswith("final.replaced-")]
    assert len(kept) == 1 and kept[0].name.endswith("-step12"), kept
    assert all(torch.equal(twelve[k], v) for k, v in _weights(run, f"pretrain/{kept[0].name}").items())
    assert [f for f in before if f not in _files(run) and not f.startswith("pretrain/final/")] == []

    straight = tmp_path / "straight"
    shutil.copytree(preprocessed[1], straight)
    assert _pretrain(recipe, straight, "--set", "pretrain.max_steps=20") == 0
    extended, reference = _weights(run), _weights(straight)
    assert extended.keys() == reference.keys()
    assert all(torch.equal(extended[k], reference[k]) for k in reference)
    assert not all(torch.equal(twelve[k], reference[k]) for k in reference)  # it did train further

    # result-neutral settings never restart (nor rerun) a finished run
    capsys.readouterr()
    for neutral in (["pretrain.tracking.tensorboard=false"], ["pretrain.log_every=3"], ["pretrain.save_every=7"],
                    ["pretrain.keep_last=2", "pretrain.num_threads=2"]):
        sets = [a for s in ["pretrain.max_steps=20", *neutral] for a in ("--set", s)]
        assert _pretrain(recipe, run, *sets) == 0
        assert "pretrain    up-to-date" in capsys.readouterr().out, neutral
    assert all(torch.equal(_weights(run)[k], reference[k]) for k in reference)


def test_a_changed_shape_is_refused_and_moved_aside_with_force(preprocessed, tmp_path, capsys):
    recipe, run = _copy(preprocessed, tmp_path)
    assert _pretrain(recipe, run) == 0
    before = _files(run)
    capsys.readouterr()
    assert _pretrain(recipe, run, "--set", "model.hidden_size=32") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: model.hidden_size changed (16 -> 32)"), err
    assert "--run-dir" in err and "--force" in err, err
    assert _files(run) == before  # nothing touched

    # a raised max_steps whose schedule changes trained steps: refused too, naming --extend
    sets = ["--set", "pretrain.max_steps=20", "--set", "pretrain.schedule=linear"]
    assert _pretrain(recipe, run, *sets) == 2
    assert "pretrain.schedule changed" in capsys.readouterr().err

    # --force: the old outputs moved aside beside pretrain/, the new run trained from scratch
    assert _pretrain(recipe, run, "--set", "model.hidden_size=32", "--force") == 0
    aside = [p for p in run.iterdir() if p.name.startswith("pretrain.replaced-")]
    assert len(aside) == 1, aside
    assert _still_there(before, run) == []
    from training.checkpoint import load_pretrained

    assert load_pretrained(run / "pretrain/final")[1].hidden_size == 32
    assert load_pretrained(aside[0] / "final")[1].hidden_size == 16
    assert (aside[0] / "final/model.safetensors").is_file() and (run / "pretrain/final/model.safetensors").is_file()

    # `bertfactory clean` lists, then (--yes) deletes the replaced outputs and nothing else
    capsys.readouterr()
    assert main(["clean", str(run)]) == 0
    assert "would delete" in capsys.readouterr().out and aside[0].exists()
    kept = {f for f in _files(run) if ".replaced-" not in f}
    assert main(["clean", str(run), "--yes"]) == 0
    assert not aside[0].exists() and _files(run) == kept
    assert main(["clean", str(tmp_path / "nope")]) == 2


def test_a_linear_schedule_extends_with_extend_through_prefect(preprocessed, tmp_path):
    """Through the Prefect flow (the CLI without --no-prefect, its own process): a linear decay that stretches with
    max_steps is refused (exit 2, one line naming --extend); with --extend the run continues from step 10; with the
    flow's force parameter (--force) a shape change moves the extended run aside."""
    recipe, run = _copy(preprocessed, tmp_path)
    linear = ["--set", "pretrain.schedule=linear"]
    assert _pretrain(recipe, run, *linear) == 0
    before = _files(run)
    script = Path(sys.executable).parent / "bertfactory"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "flows.cli"]
    args = [*cmd, "pretrain", recipe, "--run-dir", str(run), *linear, "--set", "pretrain.max_steps=20"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "pretrain.max_steps changed (12 -> 20)" in err[0] and "--extend" in err[0], proc.stderr
    assert _files(run) == before
    proc = subprocess.run([*args, "--extend"], capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "extending the run from step 10 to 20 steps" in proc.stderr, proc.stderr[-3000:]
    assert _still_there(before, run) == []
    from training.checkpoint import read_checkpoint_config

    assert read_checkpoint_config(run / "pretrain/final")["training"]["step"] == 20
    # the flow's force parameter: another shape moves the extended run aside and trains the new one
    before = _files(run)
    proc = subprocess.run([*args, "--set", "model.hidden_size=32", "--force"], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    aside = [p for p in run.iterdir() if p.name.startswith("pretrain.replaced-")]
    assert len(aside) == 1 and read_checkpoint_config(aside[0] / "final")["training"]["step"] == 20, aside
    assert read_checkpoint_config(run / "pretrain/final")["model"]["hidden_size"] == 32
    assert _still_there(before, run) == []


def test_a_longer_run_without_a_checkpoint_to_continue_keeps_the_old_one_aside(preprocessed, tmp_path, caplog):
    recipe, run = _copy(preprocessed, tmp_path)
    # save_every is result-neutral: no checkpoint in a 12-step run of a schedule that stretches with max_steps
    rare = ["--set", "pretrain.save_every=100", "--set", "pretrain.schedule=linear"]
    assert _pretrain(recipe, run, *rare) == 0
    assert not (run / "pretrain/checkpoints").exists() or not any((run / "pretrain/checkpoints").iterdir())
    before = _files(run)
    caplog.clear()
    assert _pretrain(recipe, run, *rare, "--set", "pretrain.max_steps=20") == 0
    assert "no checkpoint to continue from: the outputs in" in caplog.text and "moved to" in caplog.text, caplog.text
    assert _still_there(before, run) == []
    from training.checkpoint import read_checkpoint_config

    aside = [p for p in run.iterdir() if p.name.startswith("pretrain.replaced-")]
    assert len(aside) == 1 and read_checkpoint_config(aside[0] / "final")["training"]["step"] == 12
    assert read_checkpoint_config(run / "pretrain/final")["training"]["step"] == 20


def test_only_result_deciding_settings_are_in_the_pretrain_key(preprocessed):
    from flows.recipe import load_recipe
    from flows.stage_runner import compute_key

    recipe, run = preprocessed
    key = compute_key("pretrain", load_recipe(recipe), run)
    for neutral in ("pretrain.tracking.tensorboard=false", "pretrain.log_every=1", "pretrain.save_every=3",
                    "pretrain.keep_last=1", "pretrain.num_threads=2", "pretrain.loader_workers=1",
                    "pretrain.extend=true", "pretrain.keep_best_by=loss"):
        assert compute_key("pretrain", load_recipe(recipe, [neutral]), run) == key, neutral
    for deciding in ("pretrain.max_steps=13", "pretrain.seed=2", "model.hidden_size=32", "pretrain.schedule=linear"):
        assert compute_key("pretrain", load_recipe(recipe, [deciding]), run) != key, deciding


def test_a_wsd_run_extends_from_before_its_decay_and_sets_the_decayed_checkpoints_aside(preprocessed, tmp_path,
                                                                                         caplog, capsys):
    recipe, run = _copy(preprocessed, tmp_path)
    half = ["--set", "pretrain.wsd_decay_fraction=0.5"]  # 12 steps: decay after step 6, so step-10 decayed
    assert _pretrain(recipe, run, *half) == 0
    assert sorted(p.name for p in (run / "pretrain/checkpoints").iterdir()) == ["step-10", "step-5", "step-6"]
    caplog.clear()
    assert _pretrain(recipe, run, *half, "--set", "pretrain.max_steps=20") == 0
    assert "extending the run from its checkpoint at step 6" in caplog.text, caplog.text
    moved = [p for p in (run / "pretrain/checkpoints").iterdir() if p.name.startswith("step-10.replaced-")]
    assert len(moved) == 1 and moved[0].name.endswith("-before6"), moved
    straight = tmp_path / "straight"
    shutil.copytree(preprocessed[1], straight)
    assert _pretrain(recipe, straight, *half, "--set", "pretrain.max_steps=20") == 0
    extended, reference = _weights(run), _weights(straight)
    assert all(torch.equal(extended[k], reference[k]) for k in reference)
    capsys.readouterr()
    assert main(["clean", str(run)]) == 0
    out = capsys.readouterr().out
    assert str(moved[0]) in out and "final.replaced-" in out, out


def test_a_wsd_run_without_a_checkpoint_on_its_cadence_extends_from_its_decay_start(preprocessed, tmp_path, caplog):
    """The README's first steps: a short run (save_every beyond it) made longer continues exactly from the step
    where its decay started, not from scratch: the run writes that one checkpoint off the cadence."""
    recipe, run = _copy(preprocessed, tmp_path)
    rare = ["--set", "pretrain.save_every=100"]
    assert _pretrain(recipe, run, *rare) == 0
    assert sorted(p.name for p in (run / "pretrain/checkpoints").iterdir()) == ["step-11"]
    caplog.clear()
    assert _pretrain(recipe, run, *rare, "--set", "pretrain.max_steps=20") == 0
    assert "extending the run from its checkpoint at step 11" in caplog.text, caplog.text
    straight = tmp_path / "straight"
    shutil.copytree(preprocessed[1], straight)
    assert _pretrain(recipe, straight, *rare, "--set", "pretrain.max_steps=20") == 0
    extended, reference = _weights(run), _weights(straight)
    assert all(torch.equal(extended[k], reference[k]) for k in reference)
