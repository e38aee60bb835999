"""Issue 34 items 1 and 4, on the bundled tiny recipes as a new user runs them, from a directory of their own:

- item 4: every bundled tiny recipe (`bertfactory recipes list`, names tiny-*) preprocesses the samples it names
  and hands its shards to pretraining as shipped: only the steps are reduced through --set (2 steps; a stacking
  recipe's stages moved to the first steps) and the job runs in this process (preprocess.runner.preset=in_process:
  the same shards as the local runner's worker processes, in seconds). Phase 2 recipes find phase 1's outputs where
  they name them (tiny-modernbert-long: runs/tiny-modernbert/...).
- item 1: `bertfactory evaluate CHECKPOINT --run-dir FRESH --task-file ...` on every member's checkpoint (each tiny
  twin's, BERT's from the `local` recipe) and on an imported HF model (the real MiniLM sample) evaluates the task:
  a fresh run directory has no shards, so the held-out scores are skipped in one line, never refused.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from bertfactory.samples import sample_path
from flows.cli import main
from flows.recipe import bundled_recipes, load_recipe

pytestmark = pytest.mark.slow  # a preprocess and 2 pretraining steps per tiny recipe (~10 s each)

TINY = sorted(name for name in bundled_recipes() if name.startswith("tiny-"))
# a recipe that reads another run's outputs -> the recipe that writes them (run first, in the same directory)
NEEDS = {"tiny-modernbert-long": "tiny-modernbert"}
SMALL_EVAL = ["evaluate.finetune.num_seeds=1", "evaluate.finetune.epochs=1", "evaluate.finetune.max_train_examples=64",
              "evaluate.finetune.max_eval_examples=32", "evaluate.finetune.max_seq_len=32",
              "evaluate.finetune.batch_size=16", "evaluate.random_init_baseline=false", "evaluate.baselines=[majority]",
              "evaluate.feature_based.enabled=false", "evaluate.device=cpu", "evaluate.num_threads=1"]


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def reduced_steps(name: str) -> list[str]:
    """The recipe as shipped with fewer steps: 2, or one per stacking stage and one more."""
    pretrain = load_recipe(name).pretrain
    stacking = getattr(pretrain, "stacking", None)
    if stacking is not None and stacking.stages:
        n = len(stacking.stages)
        return [f"pretrain.max_steps={n + 1}", "pretrain.warmup_steps=1",
                f"pretrain.stacking.stages={list(range(1, n + 1))}"]
    return ["pretrain.max_steps=2", "pretrain.warmup_steps=1"]


class Twins:
    """Runs built once per module, in one working directory (runs/<name>), on demand."""

    def __init__(self, base: Path):
        self.base = base
        self.built: dict[str, Path] = {}

    def cli(self, *args: str) -> None:
        with contextlib.chdir(self.base):
            code = main(list(args))
        assert code == 0, f"bertfactory {' '.join(args)} exited {code}"

    def run(self, name: str) -> Path:
        if name not in self.built:
            if name in NEEDS:
                self.run(NEEDS[name])
            run = f"runs/{name}"
            self.cli("preprocess", name, "--run-dir", run, "--no-prefect",
                     "--set", "preprocess.runner.preset=in_process")
            self.cli("pretrain", name, "--run-dir", run, "--no-prefect", *_sets(reduced_steps(name)))
            self.built[name] = self.base / run
        return self.built[name]


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> Twins:
    return Twins(tmp_path_factory.mktemp("tiny-recipes"))


@pytest.mark.parametrize("name", TINY)
def test_a_tiny_recipe_preprocesses_its_samples_and_trains_on_them_as_shipped(name, twins):
    run = twins.run(name)
    recipe = load_recipe(name)
    manifest = json.loads((run / "shards" / "manifest.json").read_text())
    train_rows = manifest["counts"]["instances"]["train"]
    # the hand-off: a batch of the recipe fits in the train split it makes
    assert train_rows >= recipe.pretrain.batch_size, (name, train_rows, recipe.pretrain.batch_size)
    summary = json.loads((run / "pretrain" / "summary.json").read_text())
    assert summary["steps"] == int(reduced_steps(name)[0].split("=")[1])
    assert (run / "pretrain" / "final" / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def task_file(tmp_path_factory) -> Path:
    from tests.evaluation.conftest import movie_sentences

    path = tmp_path_factory.mktemp("task") / "reviews.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{s}\t{'pos' if i % 2 else 'neg'}\n"
                                              for i, s in enumerate(movie_sentences(200))))
    return path


def _evaluate_into_a_fresh_run(model: Path, fresh: Path, task_file: Path, capsys) -> dict:
    code = main(["evaluate", str(model), "--run-dir", str(fresh), "--task-file", str(task_file),
                 "--task-type", "classification", *_sets(SMALL_EVAL)])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert "no shard manifest" not in err
    assert out.count(f"evaluate: no shards at {fresh / 'shards'}: the held-out intrinsic and objective scores are "
                     "skipped") == 1
    results = json.loads((fresh / "eval" / "results.json").read_text())
    assert results["tasks"]["reviews"]["pretrained"]["runs"], "the task ran"
    assert "objective" not in results and "intrinsic" not in results
    assert not (fresh / "shards").exists()  # nothing made up in the fresh run directory
    return results


# every member: each tiny twin (the ModernBERT-class demo model among them) and BERT's own (the `local` recipe)
MEMBERS = TINY + ["local"]


@pytest.mark.parametrize("name", MEMBERS)
def test_a_members_checkpoint_is_evaluated_into_a_fresh_run_directory(name, twins, task_file, tmp_path, capsys):
    run = twins.run(name)
    capsys.readouterr()
    if name == "tiny-transformer-xl":  # a causal LM with no bidirectional encoder: fine-tuned nowhere, one line
        assert main(["evaluate", str(run / "pretrain" / "final"), "--run-dir", str(tmp_path / "eval-x"),
                     "--task-file", str(task_file), "--task-type", "classification", *_sets(SMALL_EVAL)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: a Transformer-XL checkpoint is a causal language model with no encoder") and \
            "no shard manifest" not in err, err
        return
    _evaluate_into_a_fresh_run(run / "pretrain" / "final", tmp_path / "eval-x", task_file, capsys)


def test_an_imported_hf_model_is_evaluated_into_a_fresh_run_directory(task_file, tmp_path, capsys):
    minilm = sample_path("minilm")
    hf = Path(minilm) if Path(minilm).is_dir() else Path(minilm).parent
    assert main(["import-hf", str(hf), str(tmp_path / "minilm")]) == 0
    capsys.readouterr()
    _evaluate_into_a_fresh_run(tmp_path / "minilm", tmp_path / "eval-minilm", task_file, capsys)


def test_asking_for_the_held_out_scores_without_shards_is_one_line(twins, task_file, tmp_path, capsys):
    run = twins.run("tiny-xlm-tlm")
    capsys.readouterr()
    fresh = tmp_path / "eval-y"
    code = main(["evaluate", str(run / "pretrain" / "final"), "--run-dir", str(fresh), "--task-file", str(task_file),
                 "--task-type", "classification", *_sets(SMALL_EVAL + ["evaluate.objective.enabled=true"])])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith(f"error: --set evaluate.objective.enabled=true needs shards at "
                                        f"{fresh / 'shards'}, and there are none"), err
    assert "skipped" not in out and not (fresh / "eval").exists()
