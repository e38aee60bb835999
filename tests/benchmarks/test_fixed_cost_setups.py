"""benchmarks/fixed_cost.py's job setups are valid recipes: each one's overrides of configs/local.yaml validate, and
the `raw` setup is the goal-1 path (raw documents, rows packed by tokens, dynamic masks, the tokenizer given)."""

from pathlib import Path

from bertfactory.config import apply_overrides, load_yaml, validate
from preprocessing.config import CorpusConfig, PreprocessConfig

REPO = Path(__file__).resolve().parents[2]


def test_every_job_setup_validates_and_raw_is_the_same_work_as_hf(load_benchmark, tmp_path):
    fixed_cost = load_benchmark("fixed_cost")
    configs = {}
    for setup in ("workers", "default", "given", "raw"):
        recipe = load_yaml(str(REPO / "configs" / "local.yaml"))
        recipe["corpus"] = {"inputs": [str(tmp_path)], "format": "text"}
        recipe = apply_overrides(recipe, fixed_cost.job_overrides(setup, tmp_path / "tokenizer.json"))
        configs[setup] = (validate(CorpusConfig, recipe["corpus"], "corpus"),
                          validate(PreprocessConfig, recipe["preprocess"], "preprocess"))
    corpus, cfg = configs["raw"]
    assert corpus.documents == "raw" and cfg.instances.packing == "tokens" and cfg.masking.dynamic
    assert cfg.tokenizer.path == str(tmp_path / "tokenizer.json") and cfg.tokenizer.vocab_size == fixed_cost.VOCAB
    assert configs["given"][0].documents == "clean" and configs["given"][1].instances.packing == "sentences"
