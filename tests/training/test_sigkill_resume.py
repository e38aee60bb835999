"""`bertfactory pretrain` SIGKILLed at random steps (after its first checkpoint) and rerun until done writes the
same metrics.jsonl loss curve as an uninterrupted run, exactly, on CPU; each rerun says where it resumes."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from training.checkpoint import list_checkpoints
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

REPO = Path(__file__).resolve().parents[2]
MODEL = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32}
# dropout stays on (the default 0.1): the RNG state must be restored for the curves to match
PRETRAIN = {"device": "cpu", "num_threads": 1, "seed": 3, "batch_size": 16, "max_steps": 30, "warmup_steps": 3,
            "learning_rate": 2e-3, "log_every": 1, "save_every": 4, "keep_last": 2}


def _command(recipe: Path, run: Path) -> list[str]:
    cli = Path(sys.executable).with_name("bertfactory")
    return [str(cli), "pretrain", str(recipe), "--run-dir", str(run), "--no-prefect"]


def _logged_steps(run: Path) -> int:
    path = run / "pretrain" / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return len(lines)


def _curve(run: Path) -> list[dict]:
    lines = (run / "pretrain" / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in ("tokens_per_s", "mfu")} for line in lines]


@pytest.mark.slow
def test_sigkilled_pretrain_resumes_to_the_uninterrupted_loss_curve(run_factory, tmp_path):
    straight, killed = run_factory("straight"), run_factory("killed")
    threads = torch.get_num_threads()
    try:  # the reference in this process: the same code with the same single thread as the CLI runs
        pretrain(ModelConfig(**MODEL), PretrainConfig(**PRETRAIN), straight)
    finally:
        torch.set_num_threads(threads)

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps({"name": "sigkill", "model": MODEL, "pretrain": PRETRAIN}))  # JSON is YAML
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(2026)
    kill_after = sorted(rng.sample(range(PRETRAIN["save_every"] + 1, PRETRAIN["max_steps"] - 6), 3))
    resumes = []
    for target in kill_after + [None]:
        latest = list_checkpoints(killed / "pretrain" / "checkpoints")
        proc = subprocess.Popen(_command(recipe, killed), cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        if target is not None:
            deadline = time.monotonic() + 600  # a bound for a hang, not a timing: the kill waits for the step
            while _logged_steps(killed) < target and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert proc.poll() is None, f"the run ended before step {target}: {proc.communicate()[0][-2000:]}"
            os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
        if target is not None:
            assert proc.returncode == -signal.SIGKILL
        else:
            assert proc.returncode == 0, out[-3000:]
        if latest:  # every rerun after the first says where it continues
            assert f"resuming from step {latest[-1][0]}" in out, out[-3000:]
            resumes.append(latest[-1][0])
        else:
            assert "resuming from step" not in out
    assert len(resumes) == len(kill_after) and resumes == sorted(resumes) and resumes[0] >= PRETRAIN["save_every"]
    assert [m["step"] for m in _curve(killed)] == list(range(1, PRETRAIN["max_steps"] + 1))
    assert _curve(killed) == _curve(straight)  # every loss, accuracy and lr, exactly
    final = "pretrain/final/model.safetensors"
    assert (killed / final).read_bytes() == (straight / final).read_bytes()
