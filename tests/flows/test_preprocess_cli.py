"""`bertfactory preprocess` ad-hoc flags: each becomes the override of the recipe value it names, the recipe
defaults to configs/local.yaml, --out is the run directory, and the overrides validate as a recipe."""

import json

from flows.cli import build_parser
from flows.preprocess_cli import apply_adhoc
from flows.recipe import load_recipe


def test_flags_become_overrides_of_the_default_recipe(tmp_path):
    args = build_parser().parse_args([
        "preprocess", "--input", "a.jsonl", "b.jsonl", "--format", "jsonl", "--instances", "sop-pairs",
        "--masking", "span", "--vocab-size", "1000", "--tokenizer-kind", "bpe", "--lang", "auto",
        "--out", str(tmp_path / "out"), "--set", "preprocess.seed=7",
    ])
    apply_adhoc(args)
    assert args.config == "configs/local.yaml" and args.run_dir == str(tmp_path / "out")
    assert args.overrides[0] == "preprocess.seed=7"
    assert dict(o.split("=", 1) for o in args.overrides[1:]) == {
        "corpus.inputs": json.dumps(["a.jsonl", "b.jsonl"]), "corpus.format": '"jsonl"', "corpus.lang": '"auto"',
        "preprocess.instances.format": '"sop-pairs"', "preprocess.masking.policy": '"span"',
        "preprocess.tokenizer.vocab_size": "1000", "preprocess.tokenizer.kind": '"bpe"',
    }
    recipe = load_recipe(args.config, args.overrides)
    assert recipe.corpus.inputs == ["a.jsonl", "b.jsonl"] and recipe.corpus.format == "jsonl"
    assert recipe.preprocess.instances.format == "sop-pairs" and recipe.preprocess.masking.policy == "span"
    assert recipe.preprocess.tokenizer.kind == "bpe" and recipe.preprocess.seed == 7


def test_a_repeated_input_flag_adds_its_paths():
    """`--input a --input b` read b alone (the last of a repeated nargs option), without a word."""
    args = build_parser().parse_args(["preprocess", "--input", "a.jsonl", "--input", "b.jsonl", "c.jsonl"])
    apply_adhoc(args)
    assert args.overrides == ["corpus.inputs=" + json.dumps(["a.jsonl", "b.jsonl", "c.jsonl"])]


def test_a_recipe_without_flags_is_unchanged():
    args = build_parser().parse_args(["preprocess", "configs/local.yaml", "--set", "preprocess.seed=7"])
    apply_adhoc(args)
    assert args.config == "configs/local.yaml" and args.overrides == ["preprocess.seed=7"] and args.run_dir is None
