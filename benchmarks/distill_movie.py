"""Distillation on the movie-review sentences (movie_sentiment): teacher vs student score, retention, parameters and
inference speed-up side by side in one run, for DistilBERT-style (every other layer), BERT-PKD (first k layers)
and TinyBERT-style (narrower, fewer layers) students, each beside the same student trained without distillation.
Thin wrapper around distillation.stage.run_distill; prints the report and writes RUN/distill/results.json.

    # the real MiniLM teacher (6 layers, 384 wide, no MLM head): DistilBERT-style 3-of-6 (init only: no MLM head,
    # no shards in its vocabulary), PKD-Skip 3 layers, TinyBERT-style 4 layers x 312 (12 heads) with augmentation
    python benchmarks/distill_movie.py --run-dir runs/distill-minilm --teacher-hf sample:minilm
    python benchmarks/distill_movie.py --run-dir runs/distill-minilm --teacher-hf sample:minilm --smoke   # minutes
    # our local demo run's teacher with configs/distill-local.yaml
    python benchmarks/distill_movie.py --run-dir runs/local --config configs/distill-local.yaml
    # the 12-layer teacher of configs/teacher-12layer.yaml: DistilBERT 6-of-12, TinyBERT 4 x 312 (+ ablations), on the
    # TREC questions and (in a run directory of its own) the movie-review sentences
    python benchmarks/distill_movie.py --run-dir runs/teacher12 --config configs/distill-12layer.yaml --threads 1
    python benchmarks/distill_movie.py --run-dir runs/teacher12-movie --config configs/distill-12layer.yaml --threads 1 \
        --set task=movie_sentiment --set teacher.checkpoint=../teacher12/pretrain/checkpoints/step-500 \
        --set shards=../teacher12/shards --set tinybert.ablations=false

--set KEY=VALUE overrides any config field (distillation/config.py). --threads sets torch's CPU threads
(1 on a shared machine). Speed-up = teacher / student seconds for one pass over the test inputs (median of
speed_repeats passes, batch eval_batch_size, same device).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bertfactory  # noqa: E402,F401  before torch: the pinned CPU kernels (bertfactory/cpu_kernels.py)
import torch  # noqa: E402

MINILM = {
    "teacher": {"hf": "sample:minilm"},
    "task": "movie_sentiment",
    "finetune": {"epochs": 3, "learning_rate": 1e-4, "num_seeds": 1, "batch_size": 32, "max_seq_len": 64,
                 "max_train_examples": 2000, "max_eval_examples": 800, "eval_batch_size": 64},
    "speed_repeats": 3,
    "distilbert": {"general_steps": 0, "alpha_ce": 0.0},
    "pkd": {"student_layers": 3, "strategy": "skip", "alphas": [0.5, 0.7], "temperatures": [5.0, 10.0], "beta": 100.0,
            "epochs": 3, "learning_rate": 1e-4},
    "tinybert": {"hidden_size": 312, "num_layers": 4, "intermediate_size": 1200, "num_heads": 12, "mapping": "uniform",
                 "general_steps": 0, "intermediate_epochs": 3, "prediction_epochs": 3, "learning_rate": 5e-4,
                 "augment": {"p": 0.4, "n_candidates": 15, "copies": 4, "max_examples": 1000}},
}
SMOKE = ["finetune.epochs=1", "finetune.max_train_examples=64", "finetune.max_eval_examples=64", "speed_repeats=1",
         "pkd.epochs=1", "pkd.alphas=[0.5]", "pkd.temperatures=[5.0]", "tinybert.intermediate_epochs=1",
         "tinybert.prediction_epochs=1", "tinybert.augment.copies=1", "tinybert.augment.max_examples=16",
         "distilbert.general_steps=0", "tinybert.general_steps=0"]


def main(argv: list[str] | None = None) -> int:
    from bertfactory.config import apply_overrides, load_yaml, validate
    from distillation.config import DistillConfig
    from distillation.stage import run_distill

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--config", help="distill YAML (default: the MiniLM settings above)")
    parser.add_argument("--teacher-hf", help="HF teacher directory or sample:NAME")
    parser.add_argument("--smoke", action="store_true", help="a tiny subset and one epoch: checks the run, not the scores")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    torch.set_num_threads(args.threads)
    data = load_yaml(args.config) if args.config else dict(MINILM)
    overrides = (SMOKE if args.smoke else []) + list(args.overrides)
    if args.teacher_hf:
        overrides.append(f"teacher.hf={args.teacher_hf}")
    cfg = validate(DistillConfig, apply_overrides(data, overrides), source=args.config or "benchmarks/distill_movie.py")
    started = time.perf_counter()
    run_distill(cfg, Path(args.run_dir))
    print((Path(args.run_dir) / "distill" / "report.md").read_text(encoding="utf-8"))
    print(yaml.safe_dump({"seconds": round(time.perf_counter() - started, 1), "threads": args.threads,
                          "smoke": args.smoke, "overrides": overrides}, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
