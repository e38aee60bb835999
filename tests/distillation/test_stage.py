"""The distill stage end to end on a tiny run (synthetic shards + a tiny teacher checkpoint) and the real
movie_sentiment task: results.json has every method's teacher/student scores, retention, params and speed-up;
a teacher whose tokenizer differs from the shards' is refused naming both sha256s."""

import json

import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import sha256_file
from training.checkpoint import save_pretrained
from distillation.config import DistillConfig
from distillation.stage import run_distill
from training.models.bert.model import BertConfig, BertForPreTraining


TINY = {
    "finetune": {"epochs": 1, "num_seeds": 1, "batch_size": 16, "max_seq_len": 24, "max_train_examples": 64,
                 "max_eval_examples": 32, "learning_rate": 1e-3, "eval_batch_size": 32},
    "speed_repeats": 1,
    "distilbert": {"general_steps": 4, "batch_size": 8},
    "pkd": {"student_layers": 2, "strategy": "skip", "alphas": [0.5], "temperatures": [2.0], "epochs": 1},
    "tinybert": {"hidden_size": 8, "num_layers": 2, "intermediate_size": 16, "general_steps": 4,
                 "general_batch_size": 8, "intermediate_epochs": 1, "prediction_epochs": 1,
                 "augment": {"copies": 1, "n_candidates": 2, "max_examples": 8}},
}


def _run_with_teacher(run_factory, other_tokenizer: bool = False):
    """A tiny run (tests/training/conftest.py) with a tiny random teacher in pretrain/final; `other_tokenizer`: the
    teacher is saved with the tokenizer of another vocabulary."""
    run = run_factory("run", train_rows=32, heldout_rows=8, max_seq_len=24)
    tokenizer = run / "tokenizer" / "tokenizer.json"
    vocab = 45
    if other_tokenizer:
        tokenizer, vocab = run_factory("other", words=41, train_rows=8, heldout_rows=8) / "tokenizer" / "tokenizer.json", 46
    cfg = BertConfig(vocab_size=vocab, hidden_size=16, num_layers=4, num_heads=2, intermediate_size=32,
                     max_position_embeddings=32)
    torch.manual_seed(0)
    save_pretrained(BertForPreTraining(cfg), cfg, tokenizer, run / "pretrain" / "final")
    return run, tokenizer


def test_distill_stage_writes_results_for_every_method(run_factory):
    run, _ = _run_with_teacher(run_factory)
    results = run_distill(DistillConfig.model_validate(TINY), run)
    on_disk = json.loads((run / "distill" / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results, sort_keys=True))
    assert set(results["methods"]) == {"distilbert", "pkd_skip", "tinybert"}
    for name, r in results["methods"].items():
        assert 0.0 <= r["teacher"]["score"] <= 1.0 and 0.0 <= r["student"]["score"] <= 1.0
        assert r["student"]["params"] < r["teacher"]["params"], name
        assert r["speedup"] > 0 and r["retention"] == pytest.approx(r["student"]["score"] / r["teacher"]["score"])
        assert "score" in r["student_direct"]
    assert results["methods"]["tinybert"]["augmented_examples"] == 8
    assert set(results["methods"]["tinybert"]["ablations"]) == {"no_gd", "no_td", "no_da"}
    assert results["methods"]["pkd_skip"]["layer_map"] == {1: 2} and on_disk["methods"]["pkd_skip"]["layer_map"] == {"1": 2}
    report = (run / "distill" / "report.md").read_text()
    assert "| tinybert |" in report and "pre-softmax" in report and "| no data augmentation |" in report


def test_teacher_and_shards_with_different_tokenizers_refused(run_factory):
    run, tokenizer = _run_with_teacher(run_factory, other_tokenizer=True)
    teacher_sha = sha256_file(tokenizer)
    shards_sha = sha256_file(run / "tokenizer" / "tokenizer.json")
    cfg = DistillConfig.model_validate({**TINY, "pkd": {"enabled": False}, "tinybert": {"enabled": False}})
    with pytest.raises(ContractError) as err:
        run_distill(cfg, run)
    assert teacher_sha in str(err.value) and shards_sha in str(err.value)


def test_cli_distill_command(run_factory, tmp_path, capsys):
    import yaml

    from flows.cli import main

    run, _ = _run_with_teacher(run_factory)
    config = tmp_path / "distill.yaml"
    config.write_text(yaml.safe_dump({**TINY, "distilbert": {"enabled": False}, "tinybert": {"enabled": False}}))
    assert main(["distill", str(config), "--run-dir", str(run), "--set", "pkd.epochs=2"]) == 0
    assert "| pkd_skip |" in capsys.readouterr().out
    results = json.loads((run / "distill" / "results.json").read_text())
    assert set(results["methods"]) == {"pkd_skip"}
    assert main(["distill", str(config), "--run-dir", str(run), "--set", "pkd.strategy=middle"]) == 2


def test_logit_distillation_from_a_teacher_without_mlm_head_refused_before_training(run_factory, monkeypatch):
    from distillation import stage

    run, _ = _run_with_teacher(run_factory)
    real = stage.load_teacher

    def without_head(cfg, run_dir, out_dir):
        teacher, tokenizer = real(cfg, run_dir, out_dir)
        teacher.has_mlm_head = False  # what an imported HF BertModel (MiniLM) reports
        return teacher, tokenizer

    monkeypatch.setattr(stage, "load_teacher", without_head)
    monkeypatch.setattr(stage, "_finetune", lambda *a, **k: pytest.fail("trained before refusing"))
    with pytest.raises(ConfigError, match="no trained MLM head.*hidden-state/attention"):
        run_distill(DistillConfig.model_validate(TINY), run)


def test_a_general_batch_larger_than_the_corpus_is_refused_naming_its_setting_before_training(run_factory,
                                                                                              monkeypatch):
    from distillation import stage

    run, _ = _run_with_teacher(run_factory)  # 32 train instances
    monkeypatch.setattr(stage, "_finetune", lambda *a, **k: pytest.fail("trained before refusing"))
    cfg = DistillConfig.model_validate({**TINY, "tinybert": {**TINY["tinybert"], "general_batch_size": 33}})
    with pytest.raises(ConfigError, match=r"'train' split of .*shards has 32 instances, fewer than one "
                                          r"general-distillation batch \(tinybert.general_batch_size=33\)"):
        run_distill(cfg, run)


def test_trec_questions_six_classes(run_factory):
    run, _ = _run_with_teacher(run_factory)
    cfg = DistillConfig.model_validate({**TINY, "task": "trec_coarse", "distilbert": {"enabled": False},
                                        "tinybert": {"enabled": False}})
    results = run_distill(cfg, run)
    assert results["task"] == "trec_coarse" and 0.0 <= results["methods"]["pkd_skip"]["student"]["score"] <= 1.0
    assert 0.0 < results["majority_accuracy"] < 0.5  # six classes


def test_majority_accuracy_by_hand():
    from types import SimpleNamespace

    from distillation.stage import majority_accuracy

    split = lambda labels: SimpleNamespace(features=SimpleNamespace(labels=labels))  # noqa: E731
    task = SimpleNamespace(train=split([2, 0, 2, 1, 2]), test=split([2, 1, 1, 2]))
    assert majority_accuracy(task) == 0.5  # the training majority (2) on the test labels, not the test majority


def test_inference_clock_counts_one_threads_work_not_its_waits():
    import time

    from distillation.stage import inference_clock

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        clock, name = inference_clock(torch.device("cpu"))
        assert clock is time.thread_time and "thread CPU" in name
        started = clock()
        time.sleep(0.3)  # waiting, as for a core another process holds, is not counted
        assert clock() - started < 0.1
        torch.set_num_threads(2)
        clock, name = inference_clock(torch.device("cpu"))
        assert clock is time.perf_counter and name == "wall-clock time"
    finally:
        torch.set_num_threads(threads)


def test_distilbert_without_general_distillation_fine_tunes_its_student_once(run_factory, monkeypatch):
    """general_steps 0: the layer-copied student and its 'direct' twin are the same model trained the same way, so
    the stage fine-tunes it once and reports its score for both (a second, byte-identical fine-tuning was a third of
    a MiniLM pair's CPU)."""
    import distillation.stage as stage

    run, _ = _run_with_teacher(run_factory)
    names = []
    original = stage._finetune
    monkeypatch.setattr(stage, "_finetune", lambda *a, **k: names.append(a[-1]) or original(*a, **k))
    cfg = DistillConfig.model_validate({**TINY, "distilbert": {"general_steps": 0}, "pkd": {"enabled": False},
                                        "tinybert": {"enabled": False}})
    result = run_distill(cfg, run)["methods"]["distilbert"]
    assert names == ["teacher", "distilbert"]
    assert result["student_direct"]["score"] == result["student"]["score"]
    assert "general_steps 0" in result["student_direct"]["note"]


def test_unpadded_fine_tuning_reaches_every_model_of_the_stage(run_factory, monkeypatch):
    """finetune.unpad: the teacher's and every student's TaskModel compute the real tokens only, in fine-tuning, in
    task distillation (distillation/loop.py's task_forward) and in scoring, and the stage ends as usual."""
    from evaluation import heads

    seen = []
    original = heads.TaskModel.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(self.unpad)

    monkeypatch.setattr(heads.TaskModel, "__init__", spy)
    run, _ = _run_with_teacher(run_factory)
    settings = {**TINY, "finetune": {**TINY["finetune"], "unpad": True}}
    results = run_distill(DistillConfig.model_validate(settings), run)
    assert seen and all(seen), seen
    assert set(results["methods"]) == {"distilbert", "pkd_skip", "tinybert"}
    for name, r in results["methods"].items():
        assert 0.0 <= r["student"]["score"] <= 1.0 and r["speedup"] > 0, name


@pytest.mark.parametrize("settings, expected", [
    ({"pkd": {**TINY["pkd"], "student_layers": 5}},
     r"pkd.student_layers 5 \(strategy skip\) does not fit the teacher .*pretrain/final \(4 layers, hidden 16, 2 "
     r"heads\): PKD needs 1 <= student layers <= teacher layers \(got 5 and 4\)"),
    ({"pkd": {**TINY["pkd"], "student_layers": 3}}, r"pkd.student_layers 3 .*PKD-Skip needs teacher layers 4 "
                                                    r"divisible by student layers 3"),
    ({"tinybert": {**TINY["tinybert"], "num_layers": 6}}, r"tinybert's student \(num_layers 6, hidden_size 8, "
                                                          r"num_heads null, init random\) does not fit the teacher"),
    ({"tinybert": {**TINY["tinybert"], "init": "teacher", "hidden_size": 32}},
     r"init teacher\) does not fit .*tinybert.init: teacher needs a student no wider than the teacher: "
     r"hidden_size 32 > the teacher's 16"),
    ({"tinybert": {**TINY["tinybert"], "hidden_size": 9}}, r"tinybert.hidden_size 9 is not divisible by the "
                                                           r"student's 2 attention heads"),
    ({"distilbert": {**TINY["distilbert"], "teacher_layers": [1, 5]}}, r"distilbert.teacher_layers \[1, 5\] does "
                                                                       r"not fit the teacher"),
])
def test_a_student_that_does_not_fit_the_teacher_is_refused_before_any_training(run_factory, monkeypatch, settings,
                                                                                expected):
    from distillation import stage

    run, _ = _run_with_teacher(run_factory)  # 4 layers, hidden 16, 2 heads
    # the teacher's fine-tuning and DistilBERT's training came first: PKD's and TinyBERT's students were refused
    # only when their turn came
    monkeypatch.setattr(stage, "_finetune", lambda *a, **k: pytest.fail("trained before refusing"))
    monkeypatch.setattr(stage, "run_distillation", lambda *a, **k: pytest.fail("trained before refusing"))
    with pytest.raises(ConfigError, match=expected):
        run_distill(DistillConfig.model_validate({**TINY, **settings}), run)


def test_a_misspelt_task_is_refused_when_the_config_loads_with_the_closest_name():
    from bertfactory.config import validate

    with pytest.raises(ConfigError, match=r"'task': Value error, 'movie_sentimnt' is not a built-in task \(did you "
                                          r"mean 'movie_sentiment'\? built-in: movie_sentiment, "):
        validate(DistillConfig, {"task": "movie_sentimnt"}, "d.yaml")
