"""scripts/readme_quality.py: the README's "How good are the models?" paragraph is written from the result files
(benchmarks/finetune_parity.json's schema, TAPT and distillation summaries), "not measured yet" for an absent one,
refused for a result that cannot be traced to a clean commit, and the committed README quotes the committed files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_quality", REPO / "scripts" / "readme_quality.py")
rq = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rq)


def _side(acc: float, std: float, cpu: float, ft_cpu: float) -> dict:
    return {"accuracy_mean": acc, "accuracy_std": std, "cpu_s": cpu, "wall_s": cpu, "finetune_cpu_s": ft_cpu,
            "finetune_wall_s": ft_cpu}


def _parity(**provenance) -> dict:
    """A results document as benchmarks/finetune_parity.py's run() writes it (the fields the paragraph reads)."""
    def task(train: int, ours: dict, peer: dict) -> dict:
        diff = ours["accuracy_mean"] - peer["accuracy_mean"]
        return {"files": {"sizes": {"train": train, "dev": 500, "test": 500}, "test_majority": 0.3},
                "runs": [], "tokenizer_parity": {},
                "summary": {"ours": ours, "peer": peer, "difference": diff, "within_1_point": diff >= -0.01,
                            "cpu_ratio": ours["cpu_s"] / peer["cpu_s"],
                            "finetune_cpu_ratio": ours["finetune_cpu_s"] / peer["finetune_cpu_s"],
                            "hyperparameters_equal": True, "selection_ok": True}}

    doc = {"commit": "abc1234", "dirty": False, "date": "2025-03-04T05:06:07+00:00",
           "command": "benchmarks/finetune_parity.py", "threads": 2, "seeds": [1, 2, 3],
           "hyperparameters": {"learning_rate": 5e-5, "epochs": 3, "batch_size": 32, "max_seq_len": 128,
                               "warmup_ratio": 0.1, "weight_decay": 0.01},
           "tasks": {"trec_coarse": task(4952, _side(0.9640, 0.0030, 900, 600), _side(0.9660, 0.0020, 1000, 500)),
                     "movie_sentiment": task(8544, _side(0.8000, 0.0100, 1800, 1200),
                                             _side(0.8200, 0.0050, 2000, 1250))}}
    return {**doc, **provenance}


def _write(tmp_path: Path, doc: dict, name: str = "parity.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_the_parity_sentence_quotes_the_figures_and_the_absent_sources_say_not_measured(tmp_path):
    text = rq.block(_write(tmp_path, _parity()), tmp_path / "no-tapt.json", tmp_path / "no-distill.json")
    assert text.startswith(rq.BEGIN) and text.endswith(rq.END)
    assert ("trec_coarse 0.964 ± 0.003 ours vs 0.966 ± 0.002 Trainer (-0.20 points, within 1 point)" in text)
    assert ("movie_sentiment 0.800 ± 0.010 ours vs 0.820 ± 0.005 Trainer (-2.00 points, more than 1 point below)"
            in text)
    assert "Fine-tuning CPU-seconds ours / Trainer: 1.20x (trec_coarse), 0.96x (movie_sentiment)." in text
    assert "training examples 4,952 (trec_coarse), 8,544 (movie_sentiment), 3 epochs, 3 seeds, max length 128" in text
    assert "commit abc1234, 2025-03-04, `benchmarks/finetune_parity.py`" in text
    assert f"not measured yet: `{rq.COMMANDS['tapt']}`." in text
    assert f"not measured yet: `{rq.COMMANDS['distill']}`." in text


def test_tapt_and_distillation_summaries_get_their_sentences(tmp_path):
    tapt = {"commit": "def5678", "dirty": False, "date": "2025-03-05",
            "size": {"head_warmup": 100, "epochs": 10.0, "seeds": 3,
                     "finetune": {"epochs": 3, "max_seq_len": 128}},
            "tasks": [{"task": "trec_coarse", "adapted": [0.97, 0.96, 0.98], "unadapted": [0.96, 0.95, 0.97],
                       "difference": 0.01, "detectable": 0.0163, "detected": False}]}
    stat = lambda mean, std: {"mean": mean, "std": std}  # noqa: E731
    distill = {"commit": "0f0f0f0", "dirty": False, "date": "2025-03-06", "config": "configs/distill-minilm.yaml",
               "tasks": {"movie_sentiment": {"methods": {"pkd": {
                   "teacher": stat(0.85, 0.01), "student": stat(0.80, 0.02), "retention": stat(0.941, 0.01),
                   "speedup": stat(2.04, 0.1), "seeds": [1, 2, 3]}}}}}
    text = rq.block(tmp_path / "none.json", _write(tmp_path, tapt, "tapt.json"), _write(tmp_path, distill, "d.json"))
    assert ("trec_coarse 0.960 ± 0.010 un-adapted vs 0.970 ± 0.010 adapted (+0.010 vs 0.016 detectable by the "
            "seeds: not detected)") in text and "commit def5678, 2025-03-05" in text
    assert "movie_sentiment teacher 0.850 ± 0.010, pkd 0.800 ± 0.020 (94.1% retained, 2.0x faster) over 3 seeds" in text
    assert f"Trainer**: not measured yet: `{rq.COMMANDS['parity']}`." in text


def test_tapt_tasks_measured_at_different_commits_each_name_theirs(tmp_path):
    task = {"adapted": [0.85, 0.84, 0.86], "unadapted": [0.84, 0.85, 0.86], "difference": 0.0, "detectable": 0.02,
            "detected": False}
    tapt = {"commit": "bbb2222", "dirty": False, "date": "2025-03-07",
            "size": {"head_warmup": 100, "epochs": 10.0, "seeds": 3, "finetune": {"epochs": 3, "max_seq_len": 128}},
            "tasks": [{**task, "task": "trec_coarse",
                       "measured": {"commit": "aaa1111", "dirty": False, "date": "2025-03-05"}},
                      {**task, "task": "movie_sentiment",
                       "measured": {"commit": "bbb2222", "dirty": False, "date": "2025-03-07"}}]}
    text = rq.block(tmp_path / "none.json", _write(tmp_path, tapt, "tapt.json"), tmp_path / "none.json")
    assert "trec_coarse at commit aaa1111, 2025-03-05; movie_sentiment at commit bbb2222, 2025-03-07" in text
    tapt["tasks"][0]["measured"]["dirty"] = True  # a carried task must be traceable too
    with pytest.raises(rq.QualityError, match="uncommitted changes"):
        rq.block(tmp_path / "none.json", _write(tmp_path, tapt, "tapt2.json"), tmp_path / "none.json")


@pytest.mark.parametrize("provenance, match", [
    ({"dirty": True}, "uncommitted changes"),
    ({"dirty": None}, "records no dirty"),
    ({"commit": ""}, "records no commit"),
    ({"date": None}, "records no date"),
])
def test_untraceable_results_are_refused(tmp_path, capsys, provenance, match):
    path = _write(tmp_path, _parity(**provenance))
    with pytest.raises(rq.QualityError, match=match):
        rq.block(path, tmp_path / "none", tmp_path / "none")
    readme = tmp_path / "README.md"
    readme.write_text(f"{rq.BEGIN}\n{rq.END}\n")
    assert rq.main(["--parity", str(path), "--readme", str(readme)]) == 2
    assert match in capsys.readouterr().err


def test_write_then_check_and_a_changed_result_fails_the_check(tmp_path, capsys):
    path = _write(tmp_path, _parity())
    opts = ["--parity", str(path), "--tapt", str(tmp_path / "none"), "--distill", str(tmp_path / "none")]
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{rq.BEGIN}\nstale figures\n{rq.END}\n\nrest\n")
    assert rq.main([*opts, "--readme", str(readme), "--check"]) == 1
    assert rq.main([*opts, "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "stale figures" not in text and text.startswith("intro\n\n") and text.endswith("\n\nrest\n")
    assert rq.main([*opts, "--readme", str(readme), "--check"]) == 0
    _write(tmp_path, _parity(commit="1111111"))
    assert rq.main([*opts, "--readme", str(readme), "--check"]) == 1
    assert "is not the result files'" in capsys.readouterr().err


def test_the_committed_readme_quotes_the_committed_result_files(capsys):
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.count(rq.BEGIN) == 1 and text.count(rq.END) == 1
    assert rq.main(["--check"]) == 0, capsys.readouterr().err


def test_a_merged_distillation_summary_states_sizes_and_the_goal(tmp_path):
    stat = lambda mean, std: {"mean": mean, "std": std}  # noqa: E731

    def method(student: float, retention: float) -> dict:
        return {"teacher": stat(0.90, 0.01), "student": stat(student, 0.01), "retention": stat(retention, 0.01),
                "speedup": stat(2.0, 0.05), "seeds": [1, 2, 3]}

    distill = {"commit": "0f0f0f0", "dirty": False, "date": "2025-03-06", "config": "configs/distill-minilm.yaml",
               "tasks": {"trec_coarse": {"methods": {"distilbert": method(0.88, 0.978), "pkd_skip": method(0.85, 0.944)},
                                         "finetune": {"max_train_examples": None, "max_seq_len": 32, "epochs": 3}},
                         "movie_sentiment": {"methods": {"distilbert": method(0.80, 0.889)},
                                             "finetune": {"max_train_examples": 2000, "max_seq_len": 48, "epochs": 3}}}}
    text = rq.block(tmp_path / "none.json", tmp_path / "none.json", _write(tmp_path, distill, "d.json"))
    assert "trec_coarse (all training examples, max length 32, 3 epochs) teacher 0.900 ± 0.010" in text
    assert "movie_sentiment (2,000 training examples, max length 48, 3 epochs)" in text
    assert "DistilBERT-style 3 layers 0.880 ± 0.010 (97.8% retained, 2.0x faster)" in text
    assert "met by DistilBERT-style 3 layers on trec_coarse." in text
    distill["tasks"]["trec_coarse"]["methods"]["distilbert"]["retention"] = stat(0.96, 0.01)
    text = rq.block(tmp_path / "none.json", tmp_path / "none.json", _write(tmp_path, distill, "d.json"))
    assert "retained at >= 1.8x): not met." in text


def test_a_distillation_task_carried_from_an_earlier_commit_names_its_own(tmp_path):
    stat = lambda mean, std: {"mean": mean, "std": std}  # noqa: E731
    method = {"tinybert": {"teacher": stat(0.94, 0.01), "student": stat(0.92, 0.02), "retention": stat(0.975, 0.02),
                           "speedup": stat(2.2, 0.01), "seeds": [1, 2, 3]}}
    distill = {"commit": "1111111", "dirty": False, "date": "2026-11-30", "config": "configs/distill-minilm.yaml",
               "tasks": {"trec_coarse": {"methods": method, "measured": {"commit": "2222222", "dirty": False,
                                                                         "date": "2026-11-29T16:20:17+00:00"}},
                         "movie_sentiment": {"methods": method, "measured": {"commit": "1111111", "dirty": False,
                                                                             "date": "2026-11-30"}}}}
    text = rq.block(tmp_path / "none.json", tmp_path / "none.json", _write(tmp_path, distill, "d.json"))
    assert "trec_coarse at commit 2222222, 2026-11-29; movie_sentiment at commit 1111111, 2026-11-30" in text
    distill["tasks"]["trec_coarse"]["measured"]["dirty"] = True  # a carried task is held to the same rule
    with pytest.raises(rq.QualityError, match="uncommitted"):
        rq.block(tmp_path / "none.json", tmp_path / "none.json", _write(tmp_path, distill, "d.json"))


def test_general_distillation_sentence_compares_each_student_with_itself_without_it(tmp_path):
    stat = lambda mean, std: {"mean": mean, "std": std}  # noqa: E731
    general = {"steps": [200], "entries": ["k1"], "reused": 2}
    doc = {"commit": "1a2b3c4", "dirty": False, "date": "2025-03-07", "config": "configs/distill-minilm.yaml",
           "overrides": ["--x", "shards=corpus/shards"][1:],
           "tasks": {"trec_coarse": {"methods": {
               "distilbert": {"teacher": stat(0.94, 0.01), "student": stat(0.92, 0.01), "retention": stat(0.98, 0.01),
                              "direct": stat(0.91, 0.01), "speedup": stat(2.0, 0.0), "seeds": [1, 2, 3],
                              "general_distillation": general},
               "tinybert": {"teacher": stat(0.94, 0.01), "student": stat(0.93, 0.02), "retention": stat(0.99, 0.02),
                            "direct": stat(0.87, 0.01), "speedup": stat(2.2, 0.0), "seeds": [1, 2, 3],
                            "ablations": {"no_gd": stat(0.915, 0.02)}, "general_distillation": general}}}}}
    none = tmp_path / "none.json"
    text = rq.block(none, none, none, _write(tmp_path, doc, "g.json"))
    assert ("DistilBERT-style 3 layers on trec_coarse 0.920 ± 0.010 after 200 general steps vs 0.910 ± 0.010 without "
            "(+0.010; 98.0% of the teacher retained, 3 seeds, 1 general student)") in text
    assert "TinyBERT 4 x 312 on trec_coarse 0.930 ± 0.020 after 200 general steps vs 0.915 ± 0.020 without (+0.015" in text
    assert "(shards `corpus/shards`, one general student per student shape shared by the seeds; commit 1a2b3c4" in text
    assert f"on the corpus**: not measured yet: `{rq.COMMANDS['general']}`." in rq.block(none, none, none, none)


def test_a_distillation_task_whose_seeds_ran_at_two_commits_names_each(tmp_path):
    stat = lambda mean, std: {"mean": mean, "std": std}  # noqa: E731
    method = {"tinybert": {"teacher": stat(0.85, 0.01), "student": stat(0.83, 0.01), "retention": stat(0.976, 0.01),
                           "speedup": stat(2.2, 0.01), "seeds": [1, 2, 3]}}
    groups = [{"seeds": [1, 2], "commit": "1111111", "dirty": False, "date": "2026-11-30T12:49:00+00:00"},
              {"seeds": [3], "commit": "3333333", "dirty": False, "date": "2026-11-30T20:05:00+00:00"}]
    distill = {"commit": "9999999", "dirty": False, "date": "2026-11-30", "config": "configs/distill-minilm.yaml",
               "tasks": {"movie_sentiment": {"methods": method, "measured_seeds": groups,
                                             "measured": {"commit": "9999999", "dirty": False, "date": "2026-11-30"}}}}
    text = rq.block(tmp_path / "none.json", tmp_path / "none.json", _write(tmp_path, distill, "d.json"))
    assert ("movie_sentiment seeds 1, 2 at commit 1111111, 2026-11-30 and seed 3 at commit 3333333, 2026-11-30"
            in text), text
    assert "9999999" not in text  # the commit that merged them trained nothing
    groups[1]["dirty"] = True
    with pytest.raises(rq.QualityError, match="uncommitted"):
        rq.block(tmp_path / "none.json", tmp_path / "none.json", _write(tmp_path, distill, "d.json"))


def test_a_merged_general_distillation_document_names_each_tasks_commit_shards_and_comparison(tmp_path):
    """A task without TinyBERT's in-run `no_gd` ablation is compared with the same student of the run without
    general distillation (the --distill file), over the same seeds only; each task names its own commit."""
    stat = lambda mean, std, values=None: {"mean": mean, "std": std, **({"values": values} if values else {})}  # noqa: E731
    general = {"steps": [200], "entries": ["k1"], "reused": 2}
    tiny = lambda seeds, ablations: {  # noqa: E731
        "teacher": stat(0.86, 0.01), "student": stat(0.84, 0.01), "retention": stat(0.975, 0.01),
        "direct": stat(0.80, 0.01), "speedup": stat(2.2, 0.0), "seeds": seeds, "general_distillation": general,
        **({"ablations": ablations} if ablations else {})}
    doc = {"commit": "7777777", "dirty": False, "date": "2026-12-01", "config": "configs/distill-minilm.yaml",
           "tasks": {
               "trec_coarse": {"methods": {"tinybert": tiny([1, 2, 3], {"no_gd": stat(0.83, 0.02)})},
                               "overrides": ["shards=corpus/shards"],
                               "measured": {"commit": "1111111", "dirty": False, "date": "2026-11-30"}},
               "movie_sentiment": {"methods": {"tinybert": tiny([2, 3], None)},
                                   "overrides": [f"shards={REPO / 'runs' / 'gd' / 'corpus' / 'shards'}"],
                                   "measured": {"commit": "7777777", "dirty": False, "date": "2026-12-01"}}}}
    without = {"commit": "2222222", "dirty": False, "date": "2026-11-30", "config": "configs/distill-minilm.yaml",
               "tasks": {"movie_sentiment": {"methods": {"tinybert": {
                   "teacher": stat(0.86, 0.01), "student": stat(0.83, 0.01, [0.829, 0.841, 0.831]),
                   "retention": stat(0.97, 0.01), "speedup": stat(2.2, 0.0), "seeds": [1, 2, 3]}}}}}
    none = tmp_path / "none.json"
    text = rq.block(none, none, _write(tmp_path, without, "d.json"), _write(tmp_path, doc, "g.json"))
    assert "trec_coarse at commit 1111111, 2026-11-30; movie_sentiment at commit 7777777, 2026-12-01" in text, text
    assert "shards `corpus/shards` (trec_coarse), `runs/gd/corpus/shards` (movie_sentiment)" in text, text
    assert "TinyBERT 4 x 312 on trec_coarse 0.840 ± 0.010 after 200 general steps vs 0.830 ± 0.020 without (+0.010" in text
    # seeds 2 and 3 of the run without: (0.841 + 0.831) / 2, std 0.007
    assert ("TinyBERT 4 x 312 on movie_sentiment 0.840 ± 0.010 after 200 general steps vs 0.836 ± 0.007 without in "
            "the run without general distillation, same seeds (+0.004; 97.5% of the teacher retained, 2 seeds") in text
    # without the other run, that student has nothing to be compared with and is left out
    assert "on movie_sentiment" not in rq.block(none, none, none, _write(tmp_path, doc, "g.json"))
