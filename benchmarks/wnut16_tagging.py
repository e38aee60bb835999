"""WNUT-16 (real tweets, 10 entity types, BIO) with the one fine-tuning loop: how far a checkpoint gets, and why the
tiny demo model of configs/local.yaml gets entity F1 0. Prints one JSON object per measurement.

    python benchmarks/wnut16_tagging.py --stats                                   # the data + a lexical baseline
    python benchmarks/wnut16_tagging.py --checkpoint runs/local/pretrain/final --epochs 10 --lr 2e-3
    python benchmarks/wnut16_tagging.py --checkpoint runs/local/pretrain/final --random-init --epochs 10 --lr 2e-3
    bertfactory import-hf ~/.cache/bertfactory/samples/minilm models/minilm     # the real MiniLM (no MLM head)
    python benchmarks/wnut16_tagging.py --checkpoint models/minilm --epochs 3 --lr 1e-4 --threads 2

--stats: tag shares, entities per split, how many test entities were seen as an entity in train (lower-cased, as
the tokenizers see them), and a lexical baseline (each lower-cased word's most frequent train tag, O for unseen
words) scored with the same entity F1. A fine-tuning measurement: the task's splits as evaluation.tasks.wnut16
makes them (train subset --max-train), the recipe's defaults otherwise (batch 32, warmup 10 %, linear decay,
dropout 0.1, 64 tokens); reports per epoch the train loss and dev entity F1, then entity F1 on train (the model's
fit), dev and test (the best dev epoch restored) and the share of words it tags other than O.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bertfactory  # noqa: E402,F401  before torch: the pinned CPU kernels (bertfactory/cpu_kernels.py)
import torch  # noqa: E402

from evaluation.config import FinetuneConfig  # noqa: E402
from evaluation.encode import TextEncoder  # noqa: E402
from evaluation.finetune import finetune_run, predict, prepare_task  # noqa: E402
from evaluation.heads import TaskModel  # noqa: E402
from evaluation.metrics import bio_entities, entity_f1  # noqa: E402
from evaluation.tasks.registry import BUILTIN_TASKS  # noqa: E402
from training.checkpoint import load_pretrained  # noqa: E402


def stats() -> dict:
    data = BUILTIN_TASKS["wnut16"](None)
    names = data.label_names
    out: dict = {"sizes": data.sizes()}
    tags = Counter(names[t] for e in data.train for t in e.tags)
    out["train_O_share"] = round(tags["O"] / sum(tags.values()), 4)

    def entities(examples):
        return [(" ".join(e.words[s:end + 1]).lower(), kind)
                for e in examples for kind, s, end in bio_entities([names[t] for t in e.tags])]

    train_entities = set(entities(data.train))
    test_entities = entities(data.test)
    out["entities"] = {s: len(entities(getattr(data, s))) for s in ("train", "dev", "test")}
    out["test_entities_seen_in_train"] = round(sum(e in train_entities for e in test_entities) / len(test_entities), 4)
    by_word: dict[str, Counter] = {}
    for e in data.train:
        for w, t in zip(e.words, e.tags):
            by_word.setdefault(w.lower(), Counter())[t] += 1
    outside = names.index("O")
    for split in ("dev", "test"):
        examples = getattr(data, split)
        guess = [[by_word[w.lower()].most_common(1)[0][0] if w.lower() in by_word else outside for w in e.words]
                 for e in examples]
        score = entity_f1([[names[t] for t in e.tags] for e in examples], [[names[t] for t in g] for g in guess])
        out[f"lexical_baseline_{split}"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in score.items()}
    return out


def lowercases(text_encoder: TextEncoder) -> bool:
    """Whether the tokenizer's normaliser lower-cases (then capitalisation, NER's strongest cue, is gone)."""
    normalizer = json.dumps(json.loads(text_encoder.tokenizer.to_str()).get("normalizer") or {})
    return '"lowercase": true' in normalizer or '"Lowercase"' in normalizer


def finetune(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    model, config, tokenizer = load_pretrained(Path(args.checkpoint), device="cpu")
    encoder = model.backbone()
    if args.random_init:
        torch.manual_seed(args.seed)
        encoder = type(encoder)(encoder.config)
    text_encoder = TextEncoder.from_file(tokenizer)
    cfg = FinetuneConfig(epochs=args.epochs, learning_rate=args.lr, batch_size=args.batch_size, max_seq_len=args.max_seq_len,
                         num_seeds=1, seed=args.seed, max_train_examples=args.max_train, eval_batch_size=64)
    data = BUILTIN_TASKS["wnut16"](None)
    task = prepare_task(data, text_encoder, cfg)
    outside = task.spec.label_names.index("O")
    pieces = [(len(ids), tag != outside) for e in data.train
              for (ids, _), tag in zip(text_encoder.tokenize_words([[w] for w in e.words]), e.tags)]
    started = time.perf_counter()
    run = finetune_run(encoder, task, cfg, args.lr, args.seed, torch.device("cpu"), text_encoder.pad_id, "wnut16")
    seconds = time.perf_counter() - started
    restored = TaskModel(encoder, "tagging", task.num_labels, cfg.classifier_dropout)
    restored.load_state_dict(run.best_state)
    _, train_metrics, _ = predict(restored, task, task.train, cfg, torch.device("cpu"), text_encoder.pad_id)
    words = [t for sentence in run.test_predictions for t in sentence]
    return {
        "checkpoint": args.checkpoint, "random_init": args.random_init,
        "encoder_parameters": sum(p.numel() for p in encoder.parameters()),
        "lowercase_tokenizer": lowercases(text_encoder),
        # a word split into pieces is tagged from its first piece, often a generic prefix ("d", "po", ...)
        "train_words_split": round(sum(n > 1 for n, _ in pieces) / len(pieces), 4),
        "train_entity_words_split": round(sum(n > 1 for n, e in pieces if e) / sum(e for _, e in pieces), 4),
        "train_examples": len(task.train.examples), "epochs": args.epochs, "lr": args.lr, "steps": run.steps,
        "seconds": round(seconds, 1), "threads": args.threads,
        "per_epoch": [{"epoch": e["epoch"], "train_loss": round(e["train_loss"], 4), "dev_f1": round(e["dev_score"], 4)}
                      for e in run.epochs],
        "best_epoch": run.best_epoch,
        "train_entity_f1": round(train_metrics["entity_f1"], 4),
        "dev_entity_f1": round(run.dev_metrics["entity_f1"], 4),
        "test": {k: round(v, 4) for k, v in run.test_metrics.items()},
        "test_non_O_share": round(sum(t != outside for t in words) / len(words), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stats", action="store_true", help="data statistics and the lexical baseline only")
    parser.add_argument("--checkpoint", help="model directory (RUN/pretrain/final or an import-hf output)")
    parser.add_argument("--random-init", action="store_true", help="the checkpoint's architecture from random weights")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--max-train", type=int, default=None, help="train subset (default: all 1,862 tweets)")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.stats:
        print(json.dumps(stats()))
    elif args.checkpoint:
        print(json.dumps(finetune(args)))
    else:
        parser.error("give --stats or --checkpoint")


if __name__ == "__main__":
    main()
