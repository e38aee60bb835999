"""`bertfactory preprocess` without writing a recipe: flags that override the recipe's corpus/preprocess values.

    bertfactory preprocess --input news/*.warc.gz --format warc --instances full-sentences --masking whole-word \
        --vocab-size 30522 --tokenizer-kind bpe --lang auto --out runs/news
    bertfactory preprocess --input old.jsonl new.jsonl --format jsonl --out runs/v1
    bertfactory preprocess --input news/ --format warc --tokenizer other.json --allow-high-unk --out runs/news
    bertfactory preprocess configs/local.yaml --set preprocess.masking.variants=8      # a recipe, as before

The recipe defaults to configs/local.yaml; every flag given becomes a `--set` override of it (the flags are applied
after `--set`, so a flag wins), and `--out DIR` is the run directory (DIR/shards, DIR/tokenizer).
"""

from __future__ import annotations

import argparse
import json

DEFAULT_RECIPE = "configs/local.yaml"
FORMATS = ("wikipedia", "warc", "text", "jsonl", "parallel")
INSTANCES = ("nsp-pairs", "sop-pairs", "full-sentences", "doc-sentences", "single-segment", "tlm-pairs", "clm")
MASKING = ("token", "whole-word", "ngram", "span", "entity", "dynamic")
TOKENIZER_KINDS = ("wordpiece", "bpe", "unigram")


def add_adhoc_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("ad-hoc use (each flag overrides the recipe; the recipe defaults to configs/local.yaml)")
    # extend: `--input a --input b` is both (a repeated nargs option otherwise keeps the last one only)
    g.add_argument("--input", nargs="+", action="extend", metavar="PATH",
                   help="input files, directories, globs or fsspec URLs (gs://, s3://, https://) -> corpus.inputs; "
                   "several after one flag or the flag repeated")
    g.add_argument("--format", choices=FORMATS, help="input format -> corpus.format")
    g.add_argument("--instances", choices=INSTANCES, help="instance format -> preprocess.instances.format")
    g.add_argument("--masking", choices=MASKING, help="masking scheme -> preprocess.masking.policy; dynamic -> "
                   "preprocess.masking.dynamic (no stored masks: the loader masks at read time with the policy)")
    tok = g.add_mutually_exclusive_group()
    tok.add_argument("--tokenizer", metavar="FILE", help="use this tokenizer.json -> preprocess.tokenizer.path")
    tok.add_argument("--vocab-size", type=int, metavar="N", help="train a tokenizer of N tokens")
    g.add_argument("--allow-high-unk", action="store_true", default=None,
                   help="use the --tokenizer even when it makes more of a sample of the corpus unknown than "
                   "preprocess.tokenizer.max_unk_rate (default 5 %%) -> preprocess.tokenizer.allow_high_unk")
    g.add_argument("--tokenizer-kind", choices=TOKENIZER_KINDS, help="tokenizer to train -> preprocess.tokenizer.kind")
    g.add_argument("--lang", metavar="auto|CODE",
                   help="language of documents whose source does not say: auto = detect, CODE = assume -> corpus.lang")
    g.add_argument("--parent", metavar="SHARD_DIR",
                   help="incremental mode: an existing corpus version (its shards dir); only inputs it has not "
                   "read are processed, deduplicated against it, into version N+1 -> corpus.parent")
    g.add_argument("--out", metavar="DIR", help="output (run) directory: DIR/shards and DIR/tokenizer")


def adhoc_overrides(args: argparse.Namespace) -> list[str]:
    """The `--set` overrides the ad-hoc flags stand for (values as JSON, which the override parser reads as YAML)."""
    pairs = [
        ("corpus.inputs", args.input), ("corpus.format", args.format), ("corpus.lang", args.lang),
        ("corpus.parent", args.parent), ("preprocess.instances.format", args.instances),
        ("preprocess.masking.policy", args.masking if args.masking != "dynamic" else None),
        ("preprocess.masking.dynamic", True if args.masking == "dynamic" else None),
        ("preprocess.tokenizer.path", args.tokenizer), ("preprocess.tokenizer.allow_high_unk", args.allow_high_unk),
        ("preprocess.tokenizer.vocab_size", args.vocab_size), ("preprocess.tokenizer.kind", args.tokenizer_kind),
    ]
    return [f"{key}={json.dumps(value)}" for key, value in pairs if value is not None]


def apply_adhoc(args: argparse.Namespace) -> None:
    """Turn the ad-hoc flags into the recipe, run directory and overrides the stage runner reads."""
    if args.config is None:
        args.config = DEFAULT_RECIPE
    args.overrides = list(args.overrides) + adhoc_overrides(args)
    if args.out:
        args.run_dir = args.out
    _refuse_run_directory_as_input(args.input or [], args.run_dir)


def _refuse_run_directory_as_input(inputs: list[str], run_dir: str | None) -> None:
    """`--input . --out .`: the run directory would be an input folder, and a rerun would read its own shards,
    tokenizer and replaced outputs as corpus (preprocessing.inputs refuses that once the run has stamps). Refused
    here, before the run takes its lock: a refused run leaves nothing in the corpus folder."""
    from pathlib import Path

    from bertfactory.errors import InputError
    from preprocessing.inputs import is_url, run_directory_as_input

    if not run_dir or is_url(run_dir):
        return
    out = Path(run_dir).expanduser().resolve()
    for spec in inputs:
        if is_url(spec) or spec.startswith("sample:"):
            continue
        path = Path(spec[len("file://"):] if spec.startswith("file://") else spec).expanduser()
        if path.is_dir() and path.resolve() == out:
            raise run_directory_as_input(spec, f"is the run directory {run_dir}")
