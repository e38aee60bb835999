"""Task names and run directories at the `bertfactory run` / `bertfactory evaluate` command line:

- a misspelt `evaluate.tasks` name is refused when the recipe is validated, before any stage writes anything;
- `evaluate RECIPE --task/--task-file` replaces the recipe's tasks, and the recipe's settings that name a replaced
  task (the feature-based comparison of local/demo on wnut16, cross-lingual targets, a tapt recipe's tapt.tasks) go
  with them, each said in one line;
- a run directory without a trained model is told apart from a directory that is no run at all."""

from __future__ import annotations

import json
import shutil
from argparse import Namespace

import pytest

from evaluation.results import read_results
from flows.cli import main
from flows.evaluate_cli import replaced_task_overrides, task_overrides
from flows.recipe import load_recipe, resolve_recipe
from tests.evaluation.conftest import make_eval_run, movie_sentences, one_thread

SMALL = ["--set", "evaluate.finetune.epochs=1", "--set", "evaluate.finetune.num_seeds=1",
         "--set", "evaluate.finetune.learning_rates=[1.0e-3]", "--set", "evaluate.finetune.unpad=false",
         "--set", "evaluate.finetune.max_seq_len=32", "--set", "evaluate.finetune.batch_size=16",
         "--set", "evaluate.finetune.max_train_examples=60", "--set", "evaluate.finetune.max_eval_examples=30",
         "--set", "evaluate.device=cpu", "--set", "evaluate.num_threads=1", "--set", "evaluate.workers=1",
         "--set", "evaluate.intrinsic.enabled=false", "--set", "evaluate.objective.enabled=false",
         "--set", "evaluate.random_init_baseline=false", "--set", "evaluate.baselines=[majority]"]


def files_under(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []


# ------------------------------------------------------------------------------------- 1. a misspelt task name


@pytest.mark.parametrize("prefect", [False, True], ids=["no-prefect", "prefect"])
def test_a_misspelt_task_is_refused_before_any_stage(tmp_path, monkeypatch, capsys, prefect):
    import flows.cli
    import flows.stage_runner

    def no_stage(*args, **kwargs):
        raise AssertionError("a stage was about to start: the misspelt task was not refused with the recipe")

    monkeypatch.setattr(flows.stage_runner, "run_stage", no_stage)  # --no-prefect
    monkeypatch.setattr(flows.cli, "_prefect_environment", no_stage)  # Prefect: set up just before the flow
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "typo"
    argv = ["run", "local", "--run-dir", str(run), "--set", "evaluate.tasks.trec_corse.finetune.epochs=1"]
    assert main(argv + ([] if prefect else ["--no-prefect"])) == 2
    captured = capsys.readouterr()
    assert "evaluate.tasks.trec_corse: 'trec_corse' is not a built-in task (did you mean 'trec_coarse'?" in captured.err
    assert "a task from a file needs `input` and `task_type`" in captured.err
    assert not run.exists() and files_under(tmp_path) == []  # no stage ran: no shards, no tokenizer, no stamp
    assert "preprocess" not in captured.out


def test_a_misspelt_task_of_evaluate_is_refused_before_the_stage(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "local", "--run-dir", "run", "--no-prefect", "--task", "trec_corse"]) == 2
    err = capsys.readouterr().err
    assert "'trec_corse' is not a built-in task (did you mean 'trec_coarse'?" in err
    assert "bertfactory pretrain" not in err  # refused with the recipe, not by the stage


# ------------------------------------------------------------------------- 2. --task replaces the recipe's tasks


def args_of(tasks=(), task_file=None, overrides=(), transfer_files=()) -> Namespace:
    return Namespace(tasks=list(tasks), task_file=task_file, task_type="classification" if task_file else None,
                     task_name=None, language="en", text_column=None, text_b_column=None, label_column=None,
                     label_names=None, dev_file=None, test_file=None, overrides=list(overrides),
                     transfer_files=list(transfer_files))


def recipe_with(name, args, capsys):
    overrides = [*args.overrides, *task_overrides(args), *replaced_task_overrides(args, resolve_recipe(name))]
    recipe = load_recipe(name, overrides)
    return recipe, capsys.readouterr().out


@pytest.mark.parametrize("name", ["local", "demo"])
def test_task_options_switch_off_the_recipes_feature_based_comparison(name, tmp_path, capsys):
    recipe, out = recipe_with(name, args_of(["trec_coarse"]), capsys)
    assert list(recipe.evaluate.tasks) == ["trec_coarse"] and not recipe.evaluate.feature_based.enabled
    assert out.count("\n") == 1 and "feature-based comparison on 'wnut16' is switched off" in out
    assert "add --task wnut16 to keep it" in out

    recipe, out = recipe_with(name, args_of(task_file=str(tmp_path / "stars.tsv")), capsys)
    assert list(recipe.evaluate.tasks) == ["stars"] and not recipe.evaluate.feature_based.enabled
    assert "replace its tasks with stars" in out

    recipe, out = recipe_with(name, args_of(["trec_coarse", "wnut16"]), capsys)  # its task kept: so is the comparison
    assert recipe.evaluate.feature_based.enabled and recipe.evaluate.feature_based.task == "wnut16" and out == ""


def test_a_recipe_that_names_the_wrong_task_itself_is_still_refused(capsys):
    from bertfactory.errors import ConfigError

    with pytest.raises(ConfigError, match="feature_based.task 'wnut16' is not among evaluate.tasks \\(trec_coarse\\): "
                       "add it to evaluate.tasks, set evaluate.feature_based.task to one of them, or switch the "
                       "comparison off \\(--set evaluate.feature_based.enabled=false\\)"):
        load_recipe("local", ["evaluate.tasks={trec_coarse: {}}"])  # it said only what was wrong
    # a --set of the same call that asks for the comparison is the user's: validation names the missing task
    with pytest.raises(ConfigError, match="feature_based.task 'wnut16' is not among evaluate.tasks \\(trec_coarse\\)"):
        recipe_with("local", args_of(["trec_coarse"], overrides=["evaluate.feature_based.enabled=true"]), capsys)


def test_cross_lingual_targets_of_a_replaced_task_are_left_out(tmp_path, capsys):
    import yaml

    data = yaml.safe_load(resolve_recipe("local").read_text(encoding="utf-8"))
    data["evaluate"]["crosslingual"] = [{"task": "movie_sentiment", "input": "de.tsv", "language": "de"},
                                        {"task": "trec_coarse", "input": "fr.tsv", "language": "fr"}]
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    recipe, out = recipe_with(str(recipe_file), args_of(["trec_coarse"]), capsys)
    assert [(t.task, t.language) for t in recipe.evaluate.crosslingual] == [("trec_coarse", "fr")]
    assert "cross-lingual targets of movie_sentiment are left out" in out
    # --transfer-file replaces them itself (its override comes after), and so does a --set of this call
    off = "evaluate.feature_based.enabled=false"
    assert replaced_task_overrides(args_of(["uci_sentences"], overrides=[off], transfer_files=["x.tsv"]),
                                   recipe_file) == []
    assert replaced_task_overrides(args_of(["uci_sentences"], overrides=[off, "evaluate.crosslingual=[]"]),
                                   recipe_file) == []


def test_a_tapt_recipes_tasks_follow_the_replaced_tasks(capsys):
    recipe, out = recipe_with("tapt-minilm", args_of(["trec_coarse"]), capsys)
    assert list(recipe.evaluate.tasks) == ["trec_coarse"] and recipe.tapt.tasks == ["trec_coarse"]
    recipe, out = recipe_with("tapt-minilm", args_of(["uci_sentences"]), capsys)
    assert list(recipe.evaluate.tasks) == ["uci_sentences"] and recipe.tapt.tasks is None
    assert "tapt.tasks movie_sentiment, trec_coarse -> null" in out


def test_a_checkpoint_with_the_evaluate_defaults_needs_nothing_switched_off(capsys):
    assert replaced_task_overrides(args_of(["trec_coarse"]), None) == [] and capsys.readouterr().out == ""


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    with one_thread():
        return make_eval_run(tmp_path_factory.mktemp("replaced") / "run", train_steps=0)


@pytest.mark.parametrize("name", ["local", "demo"])
def test_evaluate_a_bundled_recipe_on_other_tasks(name, model_run, tmp_path, monkeypatch, capsys):
    """The reported commands end to end on a tiny model: the recipe's evaluate stage on the tasks given."""
    monkeypatch.chdir(tmp_path)
    run = shutil.copytree(model_run, tmp_path / "run")
    if name == "local":
        task_args, expected = ["--task", "trec_coarse"], "trec_coarse"
    else:
        rows = [(s, "high" if i % 2 else "low") for i, s in enumerate(movie_sentences(120))]
        tsv = tmp_path / "stars.tsv"
        tsv.write_text("sentence\tstars\n" + "".join(f"{t}\t{s}\n" for t, s in rows))
        task_args = ["--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence",
                     "--label-column", "stars"]
        expected = "stars"
    with one_thread():
        code = main(["evaluate", name, "--run-dir", str(run), "--no-prefect", *task_args, *SMALL])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "feature-based comparison on 'wnut16' is switched off" in captured.out
    results = read_results(run / "eval")
    assert list(results["tasks"]) == [expected] and results.get("feature_based") is None


# --------------------------------------------------------------- 3. a run directory without a trained model yet


def test_a_run_directory_without_a_final_model_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "task.tsv").write_text("text\tlabel\na film\tpos\n")
    run = tmp_path / "run"
    (run / "shards").mkdir(parents=True)
    (run / "shards" / "manifest.json").write_text("{}")
    argv = ["evaluate", "run", "--task-file", "task.tsv", "--task-type", "classification"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "run is a run directory with no trained model yet" in err and "neither a recipe YAML" not in err
    assert "run `bertfactory pretrain RECIPE --run-dir run` first" in err and "newest checkpoint" not in err

    # a pretraining stopped with Ctrl-C: its newest complete checkpoint is named (step-N by number, not by name)
    for step in (50, 400, 1000):
        (run / "pretrain" / "checkpoints" / f"step-{step}").mkdir(parents=True)
    for step in (50, 400):
        (run / "pretrain" / "checkpoints" / f"step-{step}" / "config.json").write_text("{}")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no trained model yet" in err and "bertfactory evaluate run/pretrain/checkpoints/step-400" in err
    assert main(["export", "run", "--to", "hf", "hf-out"]) == 2  # export says the same of it
    err = capsys.readouterr().err
    assert "run is a run directory with no trained model yet" in err, err
    assert "bertfactory export run/pretrain/checkpoints/step-400" in err and not (tmp_path / "hf-out").exists()

    stamped = tmp_path / "stamped"  # only the stage stamps of a run (e.g. a preprocess that was refused)
    (stamped / ".bertfactory").mkdir(parents=True)
    assert main(["evaluate", "stamped", "--task-file", "task.tsv", "--task-type", "classification"]) == 2
    assert "stamped is a run directory with no trained model yet" in capsys.readouterr().err

    # an evaluation-only run directory (bertfactory evaluate MODEL --run-dir ev): it was told to pretrain
    evaluated = tmp_path / "imported"
    (tmp_path / "ev" / "eval").mkdir(parents=True)
    (tmp_path / "ev" / "eval" / "results.json").write_text(json.dumps({"checkpoint": {"path": str(evaluated)}}))
    assert main(["export", "ev", "--to", "hf", "hf-out"]) == 2
    err = capsys.readouterr().err
    assert f"ev holds an evaluation (eval/results.json) of the model directory {evaluated}, not a model of its own: " \
           f"bertfactory export {evaluated}" in err and "pretrain" not in err, err
    assert main(["evaluate", "ev", "--task-file", "task.tsv", "--task-type", "classification"]) == 2
    assert f"bertfactory evaluate {evaluated} --run-dir ev" in capsys.readouterr().err

    (tmp_path / "other").mkdir()  # a directory that is no run at all keeps its message
    assert main(["evaluate", "other", "--task-file", "task.tsv", "--task-type", "classification"]) == 2
    assert "other is neither a recipe YAML, a model directory" in capsys.readouterr().err


@pytest.mark.parametrize("options, named", [
    (["--task", "trec_coarse", "--dev-file", "dev.tsv"], "--dev-file describes"),
    (["--task", "trec_coarse", "--label-names", "a,b", "--language", "de"], "--label-names, --language describe"),
    (["--text-column", "review", "--task-type", "classification"], "--task-type, --text-column describe"),
    (["--task-name", "mine", "--test-file", "test.tsv"], "--task-name, --test-file describe"),
])
def test_task_file_options_without_a_task_file_are_refused(options, named, tmp_path, monkeypatch, capsys):
    """Was: left out without a word (only --task-type/--text-column/--label-column with a --task were refused), so
    `evaluate CHECKPOINT --text-column review` (the --task-file forgotten) fine-tuned every default task at paper
    scale, and `--task trec_coarse --dev-file dev.tsv` scored trec_coarse on its own dev split."""
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", str(tmp_path / "model"), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named} a --task-file, and none was given: add --task-file PATH") and \
        len(err.splitlines()) == 1, err
    assert files_under(tmp_path) == []


def test_a_second_task_file_is_refused_not_dropped(tmp_path, monkeypatch, capsys):
    """Was: `--task-file a.tsv --task-file b.tsv` evaluated b.tsv alone, without a word (argparse keeps the last)."""
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", str(tmp_path / "model"), "--task-file", "a.tsv", "--task-file", "b.tsv",
                 "--task-type", "classification"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --task-file is given 2 times (a.tsv, b.tsv); one task file per call") and \
        len(err.splitlines()) == 1, err
    assert files_under(tmp_path) == []


def test_a_set_of_a_listed_task_reaches_it(model_run, tmp_path, monkeypatch, capsys):
    """Was: the task list of --task/--task-file came after this call's --set and replaced it, so `--set
    evaluate.tasks.rev.finetune.epochs=1 --set evaluate.tasks.rev.finetune.learning_rates=[1e-3]` ran rev at 3 epochs
    and 2e-5 (the named rate also switched the size-scaled grid off), without a word."""
    import flows.evaluate_cli

    seen = {}
    monkeypatch.setattr(flows.evaluate_cli, "_evaluate_checkpoint",
                        lambda recipe, run_dir, has_shards: seen.setdefault("recipe", recipe) and 0)
    tsv = tmp_path / "rev.tsv"
    tsv.write_text("text\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(movie_sentences(60))))
    final = str(model_run / "pretrain" / "final")
    assert main(["evaluate", final, "--run-dir", str(tmp_path / "ev"), "--task-file", str(tsv), "--task-type",
                 "classification", "--set", "evaluate.tasks.rev.finetune.epochs=1",
                 "--set", "evaluate.tasks.rev.finetune.learning_rates=[1.0e-3]"]) == 0
    tasks = seen["recipe"].evaluate.tasks
    assert tasks["rev"].finetune == {"epochs": 1, "learning_rates": [1.0e-3]} and tasks["rev"].input == str(tsv)
    # a built-in task's --set reaches it too, and a file-layout setting there is refused (its reader ignored it)
    assert main(["evaluate", final, "--run-dir", str(tmp_path / "ev"), "--task", "trec_coarse",
                 "--set", "evaluate.tasks.trec_coarse.dev_input=dev.tsv"]) == 2
    assert "evaluate.tasks.trec_coarse: dev_input describes a task file, and the built-in task 'trec_coarse' reads " \
           "its own layout and splits" in capsys.readouterr().err
