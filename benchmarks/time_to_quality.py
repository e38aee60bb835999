"""Time to quality against transformers' Trainer (issue 18, part 6): wall-clock and CPU-seconds until a held-out MLM
loss target is reached, our trainer with the small-budget modern recipe vs transformers' `Trainer` +
`BertForMaskedLM` + `DataCollatorForLanguageModeling` at run_mlm's defaults, both from random init, on the same
text, tokenizer, model size and thread count.

    .venv/bin/python benchmarks/time_to_quality.py                       # 9 min per side, ~25 min on 2 cores
    .venv/bin/python benchmarks/time_to_quality.py --minutes 2 --runs runs/time-to-quality-quick

What runs (one after the other in this invocation, each side a fresh process pinned to `--threads` threads):
1. `bertfactory preprocess --config` (default configs/tiny-modernbert.yaml): the shards both sides learn from. Not
   timed on either side: the peer's tokenization (below) is not timed either.
2. Ours: `bertfactory pretrain` with the recipe as it is (ModernBERT-class tiny twin: pre-LN, 30 % masking, no
   dropout, wsd schedule, lr 1e-3, batch 32), checkpoints every max_steps / `--snapshots` steps.
3. The peer: transformers `Trainer` on `BertForMaskedLM(BertConfig(...))` of OUR checkpoint's hidden size, layers,
   heads, intermediate size and vocabulary (no download), the collator at mlm_probability 0.15, run_mlm's defaults
   (AdamW, lr 5e-5, linear decay, no warmup, no weight decay, batch 8, dropout 0.1, seed 42). Its text is the
   train shards' rows decoded back to text (byte-level BPE decodes losslessly; a row is cut at its special tokens so
   that documents stay apart), tokenized by `PreTrainedTokenizerFast(tokenizer_file=<the run's tokenizer.json>)`
   through `datasets` as run_mlm does without --line_by_line: tokenize every text, concatenate, cut into blocks of the
   shards' max_seq_len. A callback saves the weights every max_steps / `--snapshots` steps.
4. The budget: neither trainer has a time stop, so each side first trains a few steps, its seconds per step set
   max_steps to fill `--minutes` (its schedule is laid out over those steps), and the timing run is deleted: the
   peer's steps replace run_mlm's 3 epochs (2.4 epochs fit in 9 minutes at 1 thread in the recorded run).
   On shared cores pass `--threads 1`: OpenMP threads spinning under oversubscription slowed a step 20x at 2.
5. The clock: a watcher polls each training process every 0.2 s; a snapshot's time is when it appeared, counted from
   the process's launch (imports, data loading and model building included on both sides), and its CPU-seconds are
   the process's user + system time at that moment (/proc/PID/stat). Our checkpoints also hold the optimiser state,
   the peer's snapshots only the weights: the saving cost, if anything, is ours.
6. The score: one function scores every snapshot of both sides on the held-out shard rows under the same masks: 15 %
   of the non-special tokens (Bernoulli, seed `--seed`, 80 / 10 / 10 mask / random / keep as the collator), mean
   cross-entropy over the masked positions. The train split's unigram distribution under the same masks is the
   no-context reference.
7. The target (`--target`, default: the lowest held-out loss the peer reaches within its budget) and a ladder of
   fixed losses: for each, the first snapshot of each side at or below it (a snapshot-resolution upper bound on the
   time), and the ratio peer / ours; a side that never gets there is "> budget", and the ratio a bound.
Results: RUNS/results.json and a markdown table on stdout (recorded in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SCORING_MASK_RATE = 0.15  # the collator's rate: the held-out loss of both sides is read at the peer's masking
LADDER = (8.0, 7.5, 7.25, 7.0, 6.75, 6.5, 6.0, 5.5, 5.0)  # fixed held-out losses (nats) between random and trained
PEER_DEFAULTS = {  # run_mlm / TrainingArguments defaults the peer keeps
    "per_device_train_batch_size": 8, "learning_rate": 5e-5, "lr_scheduler_type": "linear", "warmup_steps": 0,
    "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8, "seed": 42,
}
# the tokenizer.json's special tokens under the names PreTrainedTokenizerFast gives them (manifest special_ids keys)
SPECIAL_ROLES = {"cls": "cls_token", "sep": "sep_token", "pad": "pad_token", "mask": "mask_token", "unk": "unk_token"}


# ---------------------------------------------------------------------------------------------------- shards, text

def read_rows(split_dir: Path) -> list[list[int]]:
    """Every row's input_ids of one split of the shards, in shard order."""
    import pyarrow.ipc as ipc

    rows: list[list[int]] = []
    parts = sorted(split_dir.glob("*.arrow"))
    if not parts:
        sys.exit(f"error: no .arrow shard in {split_dir}")
    for part in parts:
        try:
            table = ipc.open_stream(part).read_all()
        except Exception:  # noqa: BLE001 - a shard may be written as an IPC file instead of a stream
            table = ipc.open_file(part).read_all()
        rows += table.column("input_ids").to_pylist()
    return rows


def shard_facts(shards: Path) -> dict:
    """The manifest's tokenizer path, special ids, vocabulary size and row length."""
    manifest = json.loads((shards / "manifest.json").read_text())
    tok = manifest["tokenizer"]
    return {"tokenizer": (shards / tok["path"]).resolve(), "special_ids": tok["special_ids"],
            "vocab_size": tok["vocab_size"], "max_seq_len": manifest["instance_format"]["max_seq_len"]}


def decoded_texts(rows: list[list[int]], tokenizer_path: Path, special_ids: set[int]) -> list[str]:
    """The train rows back as text: each run of ordinary tokens between special tokens decoded on its own, so that a
    row packed across documents gives one text per document part."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    pieces: list[list[int]] = []
    for row in rows:
        current: list[int] = []
        for token in row:
            if token in special_ids:
                if current:
                    pieces.append(current)
                current = []
            else:
                current.append(token)
        if current:
            pieces.append(current)
    return [text for text in tokenizer.decode_batch(pieces) if text.strip()]


def peer_dataset(texts: list[str], tokenizer, block: int):
    """run_mlm's preprocessing without --line_by_line: tokenize every text (with its special tokens), concatenate
    all, keep whole blocks of `block` tokens."""
    from datasets import Dataset

    def tokenize(batch):
        return tokenizer(batch["text"], return_special_tokens_mask=True)

    def into_blocks(batch):
        joined = {key: [v for seq in values for v in seq] for key, values in batch.items()}
        usable = len(joined["input_ids"]) // block * block  # the tail shorter than a block is dropped, as run_mlm
        return {key: [seq[i:i + block] for i in range(0, usable, block)] for key, seq in joined.items()}

    raw = Dataset.from_dict({"text": texts})
    tokenized = raw.map(tokenize, batched=True, remove_columns=["text"])
    return tokenized.map(into_blocks, batched=True)


def peer_tokenizer(facts: dict):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(facts["tokenizer"]))
    names = {}
    for role, token_id in facts["special_ids"].items():
        if role in SPECIAL_ROLES and token_id is not None:
            names[SPECIAL_ROLES[role]] = vocab.id_to_token(token_id)
    missing = [r for r in ("mask", "pad") if r not in facts["special_ids"]]
    if missing:
        sys.exit(f"error: {facts['tokenizer']}: the manifest names no {' / '.join(missing)} token; "
                 "the collator needs both")
    return PreTrainedTokenizerFast(tokenizer_file=str(facts["tokenizer"]), **names)


# ------------------------------------------------------------------------------------------------ one score for both

def heldout_batches(rows: list[list[int]], facts: dict, seed: int, batch_size: int = 32) -> list[tuple]:
    """Held-out rows masked once: (input_ids [B, T], attention_mask [B, T], labels [B, T] -100 where not scored)."""
    import numpy as np
    import torch

    special = set(v for v in facts["special_ids"].values() if v is not None)
    mask_id, pad_id, vocab = facts["special_ids"]["mask"], facts["special_ids"]["pad"], facts["vocab_size"]
    rng = np.random.default_rng(seed)
    masked_rows = []
    for row in rows:
        ids = np.asarray(row, dtype=np.int64)
        labels = np.full_like(ids, -100)
        chosen = (rng.random(len(ids)) < SCORING_MASK_RATE) & ~np.isin(ids, list(special))
        labels[chosen] = ids[chosen]
        how = rng.random(len(ids))
        replaced = ids.copy()
        replaced[chosen & (how < 0.8)] = mask_id
        randomised = chosen & (how >= 0.8) & (how < 0.9)
        replaced[randomised] = rng.integers(0, vocab, int(randomised.sum()))
        masked_rows.append((replaced, labels))
    batches = []
    for start in range(0, len(masked_rows), batch_size):
        chunk = masked_rows[start:start + batch_size]
        longest = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), longest), pad_id, dtype=torch.long)
        attention = torch.zeros(len(chunk), longest, dtype=torch.long)
        labels = torch.full((len(chunk), longest), -100, dtype=torch.long)
        for i, (row_ids, row_labels) in enumerate(chunk):
            ids[i, :len(row_ids)] = torch.from_numpy(row_ids)
            attention[i, :len(row_ids)] = 1
            labels[i, :len(row_labels)] = torch.from_numpy(row_labels)
        batches.append((ids, attention, labels))
    return batches


def score(logits_of, batches) -> dict:
    """Mean cross-entropy and accuracy over every scored position; `logits_of(input_ids, attention_mask, scored)` ->
    logits [N, V] at the N positions where `scored` [B, T] is true (the vocabulary projection at those alone: the
    same numbers as at every position, a fraction of the cost)."""
    import torch
    import torch.nn.functional as F

    total, correct, count = 0.0, 0, 0
    with torch.inference_mode():
        for ids, attention, labels in batches:
            scored = labels != -100
            logits = logits_of(ids, attention, scored).float()
            total += F.cross_entropy(logits, labels[scored], reduction="sum").item()
            correct += int((logits.argmax(-1) == labels[scored]).sum())
            count += int(scored.sum())
    return {"mlm_loss": total / count, "mlm_acc": correct / count, "positions": count}


def unigram_score(train_rows: list[list[int]], batches, vocab: int) -> float:
    """The no-context reference: the train split's token frequencies (add-one) scored on the same positions."""
    import numpy as np

    counts = np.bincount(np.concatenate([np.asarray(r) for r in train_rows]), minlength=vocab) + 1.0
    log_p = np.log(counts / counts.sum())
    labels = np.concatenate([b[2][b[2] != -100].numpy() for b in batches])
    return float(-log_p[labels].mean())


def ours_logits(directory: Path):
    from training.checkpoint import load_pretrained

    model, _, _ = load_pretrained(directory)
    if not (hasattr(model, "bert") and hasattr(model, "mlm_head")):
        sys.exit(f"error: {directory}: {type(model).__name__} has no bert encoder + mlm_head to score")
    return lambda ids, attention, scored: model.mlm_head(model.bert(ids, None, attention)[scored],
                                                         model.bert.embeddings.word_embeddings.weight)


def peer_logits(directory: Path, config_doc: dict):
    from safetensors.torch import load_model
    from transformers import BertConfig, BertForMaskedLM

    model = BertForMaskedLM(BertConfig(**config_doc))
    load_model(model, str(directory / "model.safetensors"))  # strict: every weight, the tied decoder once
    model.eval()
    # BertForMaskedLM's own head (transform + tied decoder), as its forward applies it, at the scored positions
    return lambda ids, attention, scored: model.cls(model.bert(input_ids=ids, attention_mask=attention)
                                                    .last_hidden_state[scored])


# --------------------------------------------------------------------------------------------------- timed processes

def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process (all its threads), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_watched(command: list[str], log: Path, threads: int, snapshots_of) -> dict:
    """Run `command` (output to `log`) while polling `snapshots_of()` -> {name: directory} every 0.2 s; each new
    snapshot gets the wall and CPU seconds since launch at which it was first seen."""
    seen: dict[str, dict] = {}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    last_cpu = [0.0]
    with open(log, "a") as out:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)

        def look() -> None:
            cpu = process_cpu_seconds(proc.pid)
            if cpu is not None:
                last_cpu[0] = cpu
            for name, directory in snapshots_of().items():
                if name not in seen:
                    seen[name] = {"dir": str(directory), "wall_s": time.perf_counter() - start, "cpu_s": last_cpu[0]}

        while proc.poll() is None:
            look()
            time.sleep(0.2)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"error: {' '.join(Path(c).name for c in command[:3])} exited {proc.returncode}: {tail[0][:300]} "
                 f"(log {log})")
    last_cpu[0] = cpu  # snapshots first seen after the exit were written at its end
    look()
    return {"wall_s": wall, "cpu_s": cpu, "snapshots": seen}


def bertfactory(args: list[str], log: Path, threads: int) -> None:
    run_watched([str(Path(sys.executable).parent / "bertfactory"), *args], log, threads, dict)


def sets(lines: list[str]) -> list[str]:
    return [a for s in lines for a in ("--set", s)]


def ours_snapshots(run_dir: Path):
    from training.checkpoint import list_checkpoints

    def found() -> dict:
        out = {f"step-{step}": path for step, path in list_checkpoints(run_dir / "pretrain" / "checkpoints")}
        final = run_dir / "pretrain" / "final"
        if (final / "model.safetensors").is_file() and (final / "config.json").is_file():
            out["final"] = final
        return out
    return found


def peer_snapshots(out_dir: Path):
    def found() -> dict:
        root = out_dir / "snapshots"
        return {p.name: p for p in sorted(root.glob("step-*"))} if root.is_dir() else {}
    return found


def train_ours(run_dir: Path, args, common: list[str]) -> dict:
    config = str(args.config)
    log = run_dir.parent / "ours.log"
    pretrain = [str(Path(sys.executable).parent / "bertfactory"), "pretrain", config, "--run-dir", str(run_dir),
                "--no-prefect"]
    shutil.rmtree(run_dir / "pretrain", ignore_errors=True)
    bertfactory(pretrain[1:] + sets(common + [f"pretrain.max_steps={args.calibration_steps}",
                                              f"pretrain.save_every={args.calibration_steps * 10}"]), log, args.threads)
    calibration = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    per_step = calibration["seconds"] / calibration["steps"]
    model_doc = json.loads((run_dir / "pretrain" / "final" / "config.json").read_text())["model"]
    shutil.rmtree(run_dir / "pretrain")
    steps = max(args.calibration_steps, round(args.minutes * 60 / per_step))
    every = max(1, steps // args.snapshots)
    watched = run_watched(pretrain + sets(common + [f"pretrain.max_steps={steps}", f"pretrain.save_every={every}",
                                                     "pretrain.keep_last=100000"]), log, args.threads,
                          ours_snapshots(run_dir))
    summary = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    return {"calibration_s_per_step": per_step, "max_steps": steps, "save_every": every, "model": model_doc,
            "parameters": summary["parameters"], "trainer_seconds": summary["seconds"], "tokens": summary["tokens"],
            **watched}


def peer_config(model_doc: dict, facts: dict) -> dict:
    """BertConfig keys of the same size as our checkpoint (BERT's own defaults for everything else)."""
    return {"vocab_size": model_doc["vocab_size"], "hidden_size": model_doc["hidden_size"],
            "num_hidden_layers": model_doc["num_layers"], "num_attention_heads": model_doc["num_heads"],
            "intermediate_size": model_doc["intermediate_size"], "max_position_embeddings": facts["max_seq_len"],
            "type_vocab_size": 1, "pad_token_id": facts["special_ids"]["pad"]}


def train_peer(out_dir: Path, args, config_doc: dict) -> dict:
    log = out_dir.parent / "peer.log"
    worker = [sys.executable, str(Path(__file__).resolve()), "--peer-worker", "--peer-dir", str(out_dir),
              "--threads", str(args.threads)]
    (out_dir / "bert_config.json").write_text(json.dumps(config_doc, indent=2, sort_keys=True))
    shutil.rmtree(out_dir / "snapshots", ignore_errors=True)
    run_watched(worker + ["--peer-steps", str(args.peer_calibration_steps), "--peer-every", "0"], log, args.threads,
                dict)
    calibration = json.loads((out_dir / "train_metrics.json").read_text())
    per_step = calibration["train_runtime"] / calibration["steps"]
    steps = max(args.peer_calibration_steps, round(args.minutes * 60 / per_step))
    every = max(1, steps // args.snapshots)
    watched = run_watched(worker + ["--peer-steps", str(steps), "--peer-every", str(every)], log, args.threads,
                          peer_snapshots(out_dir))
    metrics = json.loads((out_dir / "train_metrics.json").read_text())
    return {"calibration_s_per_step": per_step, "max_steps": steps, "save_every": every,
            "parameters": metrics["parameters"], "trainer_seconds": metrics["train_runtime"],
            "tokens": metrics["steps"] * PEER_DEFAULTS["per_device_train_batch_size"] * metrics["block"],
            "blocks": metrics["blocks"], "epochs": metrics["epochs"], **watched}


def peer_worker(args) -> None:
    """The peer's training process: Trainer + BertForMaskedLM + the collator on the prepared blocks."""
    import torch
    from datasets import load_from_disk
    from safetensors.torch import save_model
    from transformers import (BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling, Trainer,
                              TrainerCallback, TrainingArguments, set_seed)

    torch.set_num_threads(args.threads)
    out_dir = args.peer_dir
    facts = json.loads((out_dir / "facts.json").read_text())
    facts["tokenizer"] = Path(facts["tokenizer"])
    blocks = load_from_disk(str(out_dir / "blocks"))
    tokenizer = peer_tokenizer(facts)
    set_seed(PEER_DEFAULTS["seed"])  # run_mlm seeds before it builds the model
    model = BertForMaskedLM(BertConfig(**json.loads((out_dir / "bert_config.json").read_text())))
    snapshots = out_dir / "snapshots"

    class Snapshots(TrainerCallback):
        def on_step_end(self, _args, state, control, model=None, **kwargs):
            step = state.global_step
            if args.peer_every and (step % args.peer_every == 0 or step == state.max_steps):
                staging = snapshots / f".step-{step}.tmp"
                staging.mkdir(parents=True, exist_ok=True)
                save_model(model, str(staging / "model.safetensors"))  # the tied decoder weight once
                staging.rename(snapshots / f"step-{step}")  # the watcher sees only complete snapshots

    training_args = TrainingArguments(
        output_dir=str(out_dir / "trainer"), max_steps=args.peer_steps, use_cpu=True, report_to="none",
        save_strategy="no", eval_strategy="no", logging_steps=max(1, args.peer_steps // 20), disable_tqdm=True,
        dataloader_num_workers=0, **PEER_DEFAULTS)
    collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15)
    trainer = Trainer(model=model, args=training_args, train_dataset=blocks, data_collator=collator,
                      callbacks=[Snapshots()])
    result = trainer.train()
    doc = {"steps": result.global_step, "train_runtime": result.metrics["train_runtime"],
           "train_loss": result.training_loss, "parameters": sum(p.numel() for p in model.parameters()),
           "blocks": len(blocks), "block": len(blocks[0]["input_ids"]),
           "epochs": result.global_step * PEER_DEFAULTS["per_device_train_batch_size"] / len(blocks)}
    tmp = out_dir / "train_metrics.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
    tmp.replace(out_dir / "train_metrics.json")


# ---------------------------------------------------------------------------------------------------- the comparison

def curve(side: dict, logits_of, batches) -> list[dict]:
    """Every snapshot of one side scored, in the order they appeared."""
    points = []
    for name, info in sorted(side["snapshots"].items(), key=lambda kv: kv[1]["wall_s"]):
        points.append({"snapshot": name, "wall_s": info["wall_s"], "cpu_s": info["cpu_s"],
                       **score(logits_of(Path(info["dir"])), batches)})
    return points


def first_at(points: list[dict], target: float) -> dict | None:
    return next((p for p in points if p["mlm_loss"] <= target), None)


def reach(curves: dict, target: float) -> dict:
    """Time to `target` on both sides and the ratio peer / ours: a bound when a side never gets there, or when our
    first snapshot is already there (it may have got there sooner)."""
    out = {"target": target}
    for side, points in curves.items():
        hit = first_at(points, target)
        out[side] = {"wall_s": hit["wall_s"], "cpu_s": hit["cpu_s"], "snapshot": hit["snapshot"],
                     "first": hit is points[0]} if hit else None
    ours, peer = out["ours"], out["peer"]
    budget = {s: curves[s][-1] for s in curves}
    if ours and peer:
        out["ratio"], out["ratio_kind"] = peer["wall_s"] / ours["wall_s"], ">=" if ours["first"] else "="
        out["cpu_ratio"] = peer["cpu_s"] / ours["cpu_s"]
    elif ours:
        out["ratio"], out["ratio_kind"] = budget["peer"]["wall_s"] / ours["wall_s"], ">"
        out["cpu_ratio"] = budget["peer"]["cpu_s"] / ours["cpu_s"]
    elif peer:
        out["ratio"], out["ratio_kind"] = peer["wall_s"] / budget["ours"]["wall_s"], "<"
    else:
        out["ratio"], out["ratio_kind"] = None, "neither"
    return out


def cell(hit: dict | None) -> str:
    if not hit:
        return "> budget"
    return f"{'<= ' if hit.get('first') else ''}{hit['wall_s']:.0f} s ({hit['cpu_s']:.0f} CPU s)"


def ratio_cell(r: dict) -> str:
    if r["ratio"] is None:
        return "-"
    kind = r["ratio_kind"] if r["ratio_kind"] != "=" else ""
    return f"{kind}{r['ratio']:.1f}x" + (f" (CPU {kind}{r['cpu_ratio']:.1f}x)" if "cpu_ratio" in r else "")


def tables(result: dict) -> str:
    ours, peer = result["ours"], result["peer"]
    m, c = ours["model"], result["peer_config"]
    lines = ["| | ours (bertfactory pretrain) | peer (transformers Trainer) |", "|---|---|---|",
             f"| model | {result['ours_architecture']} | BertForMaskedLM |",
             f"| hidden / layers / heads / intermediate / vocab | {m['hidden_size']} / {m['num_layers']} / "
             f"{m['num_heads']} / {m['intermediate_size']} / {m['vocab_size']} | {c['hidden_size']} / "
             f"{c['num_hidden_layers']} / {c['num_attention_heads']} / {c['intermediate_size']} / {c['vocab_size']} |",
             f"| parameters (with embeddings) | {ours['parameters']:,} | {peer['parameters']:,} |",
             f"| recipe | {result['ours_recipe']} | {result['peer_recipe']} |",
             f"| calibrated s/step -> max_steps (snapshot every) | {ours['calibration_s_per_step']:.3f} -> "
             f"{ours['max_steps']} ({ours['save_every']}) | {peer['calibration_s_per_step']:.4f} -> "
             f"{peer['max_steps']} ({peer['save_every']}) |",
             f"| process wall s / CPU s (trainer loop s) | {ours['wall_s']:.0f} / {ours['cpu_s']:.0f} "
             f"({ours['trainer_seconds']:.0f}) | {peer['wall_s']:.0f} / {peer['cpu_s']:.0f} "
             f"({peer['trainer_seconds']:.0f}) |",
             f"| tokens seen | {ours['tokens']:,} | {peer['tokens']:,} ({peer['epochs']:.1f} epochs of "
             f"{peer['blocks']:,} blocks) |"]
    best = {s: min(result["curves"][s], key=lambda p: p["mlm_loss"]) for s in ("ours", "peer")}
    lines.append(f"| best held-out MLM loss / acc (15 %, same masks) | {best['ours']['mlm_loss']:.3f} / "
                 f"{best['ours']['mlm_acc']:.3f} | {best['peer']['mlm_loss']:.3f} / {best['peer']['mlm_acc']:.3f} |")
    lines.append(f"| unigram (no-context) loss on the same positions | {result['unigram_loss']:.3f} | "
                 f"{result['unigram_loss']:.3f} |")
    lines += ["", "| held-out MLM loss target | ours: time to target | peer: time to target | peer / ours |",
              "|---|---|---|---|"]
    main = result["target"]
    for r in [main, *result["ladder"]]:
        name = f"**{r['target']:.3f}** ({result['target_source']})" if r is main else f"{r['target']:.2f}"
        lines.append(f"| {name} | {cell(r['ours'])} | {cell(r['peer'])} | {ratio_cell(r)} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=9.0, help="training wall-clock budget per side")
    parser.add_argument("--threads", type=int, default=2, help="torch threads on both sides (pinned)")
    parser.add_argument("--snapshots", type=int, default=30, help="snapshots per side over its budget")
    parser.add_argument("--calibration-steps", type=int, default=30, help="steps of our timing run")
    parser.add_argument("--peer-calibration-steps", type=int, default=60,
                        help="steps of the peer's timing run (its steps cost more than their rows suggest: "
                             "BertForMaskedLM scores all positions)")
    parser.add_argument("--target", type=float, default=None,
                        help="held-out MLM loss target (default: the peer's lowest within its budget)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out masks")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "tiny-modernbert.yaml",
                        help="our recipe (its preprocess builds the shards both sides use)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="a recipe override for preprocess and pretrain (repeatable), e.g. for a tiny test corpus")
    parser.add_argument("--from-results", type=Path, default=None,
                        help="print the tables of an earlier run's results.json again (its time-to-target "
                             "recomputed from the stored curves and --target) instead of running")
    parser.add_argument("--keep-snapshots", action="store_true", help="keep both sides' snapshots after scoring")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "time-to-quality")
    # the peer's training process (this script, started by the comparison)
    parser.add_argument("--peer-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peer-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--peer-steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--peer-every", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("minutes", "threads", "snapshots", "calibration_steps", "peer_calibration_steps"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.peer_worker:
        peer_worker(args)
        return
    if args.from_results:
        result = json.loads(args.from_results.read_text())
        curves = result["curves"]
        if args.target is not None:
            result["target_source"] = "--target"
        target = args.target if args.target is not None else min(p["mlm_loss"] for p in curves["peer"])
        result["target"], result["ladder"] = reach(curves, target), [reach(curves, t) for t in LADDER]
        tmp = args.from_results.with_name(args.from_results.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
        tmp.replace(args.from_results)
        print(tables(result))
        return
    import torch

    args.runs.mkdir(parents=True, exist_ok=True)
    run_dir, peer_dir = args.runs / "ours", args.runs / "peer"
    peer_dir.mkdir(exist_ok=True)
    common = args.overrides + [f"pretrain.num_threads={args.threads}"]
    if not (run_dir / "shards" / "manifest.json").is_file():
        bertfactory(["preprocess", str(args.config), "--run-dir", str(run_dir), "--no-prefect", *sets(common)],
                    args.runs / "ours.log", args.threads)
    facts = shard_facts(run_dir / "shards")
    special = {v for v in facts["special_ids"].values() if v is not None}
    train_rows = read_rows(run_dir / "shards" / "train")
    texts = decoded_texts(train_rows, facts["tokenizer"], special)
    blocks = peer_dataset(texts, peer_tokenizer(facts), facts["max_seq_len"])
    if len(blocks) == 0:
        sys.exit(f"error: {run_dir / 'shards' / 'train'}: fewer than {facts['max_seq_len']} tokens of text")
    shutil.rmtree(peer_dir / "blocks", ignore_errors=True)
    blocks.save_to_disk(str(peer_dir / "blocks"))
    (peer_dir / "facts.json").write_text(json.dumps({**facts, "tokenizer": str(facts["tokenizer"])}, indent=2))

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    started = time.perf_counter()
    ours = train_ours(run_dir, args, common)
    print(f"ours: {ours['max_steps']} steps, {ours['wall_s']:.0f} s", flush=True)
    config_doc = peer_config(ours["model"], facts)
    peer = train_peer(peer_dir, args, config_doc)
    print(f"peer: {peer['max_steps']} steps, {peer['wall_s']:.0f} s", flush=True)
    timings = args.runs / "timings.json.tmp"  # the clock's record survives a failure while scoring
    timings.write_text(json.dumps({"ours": ours, "peer": peer, "peer_config": config_doc}, indent=2, sort_keys=True))
    timings.replace(args.runs / "timings.json")

    torch.set_num_threads(args.threads)
    batches = heldout_batches(read_rows(run_dir / "shards" / "heldout"), facts, args.seed)
    curves = {"ours": curve(ours, ours_logits, batches),
              "peer": curve(peer, lambda d: peer_logits(d, config_doc), batches)}
    for side, points in curves.items():
        bad = [p["snapshot"] for p in points if not math.isfinite(p["mlm_loss"])]
        if bad or not points:
            sys.exit(f"error: {side}: no snapshot or a non-finite held-out loss at {bad}")
    peer_best = min(p["mlm_loss"] for p in curves["peer"])
    target = args.target if args.target is not None else peer_best
    for side in (ours, peer):
        side.pop("snapshots")
    result = {
        "commit": commit, "args": {k: str(v) for k, v in vars(args).items() if not k.startswith("peer_")},
        "ours": ours, "peer": peer, "peer_config": config_doc, "peer_defaults": PEER_DEFAULTS,
        "ours_architecture": json.loads((run_dir / "pretrain" / "final" / "config.json").read_text())["architecture"],
        "ours_recipe": f"{args.config.name}{' + ' + ', '.join(args.overrides) if args.overrides else ''}",
        "peer_recipe": "run_mlm defaults: AdamW lr 5e-5, linear, no warmup, batch 8, mlm 0.15, dropout 0.1",
        "heldout": {"rows": sum(len(b[0]) for b in batches), "positions": curves["ours"][0]["positions"],
                    "mask_rate": SCORING_MASK_RATE, "seed": args.seed},
        "unigram_loss": unigram_score(train_rows, batches, facts["vocab_size"]),
        "curves": curves, "target_source": "--target" if args.target is not None else "the peer's best",
        "target": reach(curves, target), "ladder": [reach(curves, t) for t in LADDER],
        "total_wall_s": time.perf_counter() - started,
    }
    tmp = args.runs / "results.json.tmp"
    tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
    tmp.replace(args.runs / "results.json")
    if not args.keep_snapshots:
        shutil.rmtree(run_dir / "pretrain" / "checkpoints", ignore_errors=True)
        shutil.rmtree(peer_dir / "snapshots", ignore_errors=True)
    print(tables(result))
    print(f"\ncommit {commit}; held-out: {result['heldout']['rows']} rows, {result['heldout']['positions']:,} "
          f"scored positions; results {args.runs / 'results.json'}")


if __name__ == "__main__":
    main()
