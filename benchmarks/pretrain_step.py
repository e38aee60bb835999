"""Pretraining step throughput: our BertForPreTraining vs transformers' BertForPreTraining (attn_implementation
"sdpa"), same architecture, same batches, same optimiser (AdamW), CPU fp32, measured side by side in one run.

    python benchmarks/pretrain_step.py --shape tiny           # configs/local.yaml's model, batch 32 x 128
    python benchmarks/pretrain_step.py --shape base --steps 3 # BERT-base, batch 32 x 128 (slow on 2 cores)
    python benchmarks/pretrain_step.py --fused-mlm-loss       # also ours with pretrain.fused_mlm_loss ("ours-fused")

Each measurement runs in a fresh subprocess (so peak memory is the step's own), alternating ours / HF for
`--repeats` rounds; the median tokens/s of each is reported with the ratio. A step is forward + backward +
clip + AdamW + zero_grad on a full-length batch with 15 % of the tokens masked (max 20 per sequence, as BERT).
HF computes MLM logits at every position (its design); ours only at the masked ones — the difference in work is
printed as FLOPs per token next to a matrix-multiply calibration of this machine (GFLOP/s of one large GEMM).
`--fused-mlm-loss` adds a third implementation to each round, ours with `pretrain.fused_mlm_loss` (the MLM decoder
and its cross-entropy chunk by chunk, training/models/core/fused_loss.py), with its own ratio to HF.
Needs `transformers` (a test dependency): pip install -c constraints.txt transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = {
    # name: (hidden, layers, heads, intermediate, vocab)
    "tiny": (128, 2, 2, 512, 8000),
    "base": (768, 12, 12, 3072, 30522),
}
SEQ_LEN, BATCH, MAX_PREDICTIONS = 128, 32, 20


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _batch(vocab: int, seed: int = 0, batch: int = BATCH, max_predictions: int = MAX_PREDICTIONS,
           seq_len: int = SEQ_LEN) -> dict:
    """Identical full-length batches for every benchmark: random ids, `max_predictions` sorted masked positions per
    sequence ([MASK] = 4), segments split in half, random NSP labels."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, seq_len), generator=g)
    positions = torch.stack([torch.randperm(seq_len - 2, generator=g)[:max_predictions] + 1 for _ in range(batch)])
    positions, _ = positions.sort(dim=1)
    labels = ids.gather(1, positions)
    masked = ids.scatter(1, positions, 4)  # [MASK]
    types = torch.zeros_like(ids)
    types[:, seq_len // 2:] = 1
    return {"input_ids": masked, "token_type_ids": types, "attention_mask": torch.ones_like(ids),
            "masked_positions": positions, "masked_labels": labels,
            "nsp_labels": torch.randint(0, 2, (batch,), generator=g)}


def _worker(impl: str, shape: str, steps: int, warmup: int) -> dict:
    import torch

    hidden, layers, heads, inter, vocab = SHAPES[shape]
    batch = _batch(vocab)
    torch.manual_seed(0)
    if impl in ("ours", "ours-fused"):
        from training.models.bert.model import BertConfig, BertForPreTraining

        model = BertForPreTraining(BertConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads,
                                              intermediate_size=inter, max_position_embeddings=512))
        model.fused_mlm_loss = impl == "ours-fused"  # what pretrain.fused_mlm_loss sets (training/pretrain_model.py)

        def loss_of() -> torch.Tensor:
            return model(**batch)["loss"]
    else:
        import transformers

        cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                      num_attention_heads=heads, intermediate_size=inter, max_position_embeddings=512)
        model = transformers.BertForPreTraining._from_config(cfg, attn_implementation="sdpa")
        dense_labels = torch.full_like(batch["input_ids"], -100).scatter(1, batch["masked_positions"], batch["masked_labels"])
        hf_inputs = {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"],
                     "attention_mask": batch["attention_mask"], "labels": dense_labels,
                     "next_sentence_label": batch["nsp_labels"]}

        def loss_of() -> torch.Tensor:
            return model(**hf_inputs).loss
    return {"impl": impl, **time_training_steps(model, list(model.parameters()), loss_of, warmup, steps,
                                                BATCH * SEQ_LEN)}


def time_training_steps(model, params: list, loss_of, warmup: int, steps: int, tokens_per_step: int,
                        synchronize=None) -> dict:
    """Time `steps` training steps (forward via `loss_of()`, backward, clip, AdamW, zero_grad) after `warmup`
    untimed ones; tokens/s, seconds per step, the step's peak extra resident memory (this process must be fresh),
    threads and parameters. Shared by every step benchmark so that all of them measure the same thing.
    `synchronize` (e.g. torch.cuda.synchronize): called before each clock reading, for asynchronous devices."""
    import torch

    model.train()
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    rss_before = _rss_kib("VmRSS:")

    def step() -> None:
        loss = loss_of()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    sync = synchronize or (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    seconds = time.perf_counter() - started
    return {"tokens_per_s": steps * tokens_per_step / seconds, "seconds_per_step": seconds / steps,
            "peak_extra_mib": (_rss_kib("VmHWM:") - rss_before) / 1024, "threads": torch.get_num_threads(),
            "parameters": sum(p.numel() for p in params)}


def gemm_gflops(hidden: int) -> float:
    """GFLOP/s of one [4096, H] x [H, 4H] fp32 matrix multiply, the FFN's shape at batch 32 x 128."""
    import torch

    a, b = torch.randn(4096, hidden), torch.randn(hidden, 4 * hidden)
    for _ in range(3):
        a @ b
    reps = max(3, int(2e10 / (2 * 4096 * hidden * 4 * hidden)))
    started = time.perf_counter()
    for _ in range(reps):
        a @ b
    return reps * 2 * 4096 * hidden * 4 * hidden / (time.perf_counter() - started) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of ours / HF")
    parser.add_argument("--fused-mlm-loss", action="store_true",
                        help="also measure ours with pretrain.fused_mlm_loss in every round")
    parser.add_argument("--worker", choices=["ours", "ours-fused", "hf"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.shape, args.steps, args.warmup)))
        return

    import torch
    import transformers

    from training.config import ModelConfig
    from training.describe import describe

    hidden, layers, heads, inter, vocab = SHAPES[args.shape]
    d = describe(ModelConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter),
                 vocab, SEQ_LEN, MAX_PREDICTIONS / SEQ_LEN)
    impls = ("ours", "ours-fused", "hf") if args.fused_mlm_loss else ("ours", "hf")
    runs: dict[str, list[dict]] = {impl: [] for impl in impls}
    for _ in range(args.repeats):
        for impl in impls:
            out = subprocess.run([sys.executable, __file__, "--worker", impl, "--shape", args.shape, "--steps",
                                  str(args.steps), "--warmup", str(args.warmup)],
                                 capture_output=True, text=True, check=True, env=dict(os.environ))
            runs[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
    gemm = gemm_gflops(hidden)
    median = {impl: statistics.median(r["tokens_per_s"] for r in rs) for impl, rs in runs.items()}
    memory = {impl: statistics.median(r["peak_extra_mib"] for r in rs) for impl, rs in runs.items()}
    print(f"shape {args.shape}: {layers} layers, hidden {hidden}, heads {heads}, FFN {inter}, vocab {vocab}; batch "
          f"{BATCH} x {SEQ_LEN}, {MAX_PREDICTIONS} masked per sequence; torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {runs['ours'][0]['threads']} threads; {args.repeats} x {args.steps} steps")
    print_comparison(runs, median, memory, d, hidden, gemm)


def print_comparison(runs: dict, median: dict, memory: dict, d, hidden: int, gemm: float) -> None:
    """The per-implementation lines, the ratio of each of ours to HF and the FLOPs/GEMM line shared by the BERT and
    ALBERT benchmarks (`runs`: "ours", "hf" and any other variant of ours, e.g. "ours-fused")."""
    width = max(len(impl) for impl in runs)
    for impl in runs:
        useful = median[impl] * d.train_flops_per_token / 1e9
        each = ", ".join(f"{r['tokens_per_s']:,.0f}" for r in runs[impl])
        print(f"  {impl:<{width}} {median[impl]:>10,.0f} tokens/s  (runs: {each})  peak extra memory "
              f"{memory[impl]:,.0f} MiB  useful model GFLOP/s {useful:,.1f}")
    for impl in (i for i in runs if i != "hf"):
        print(f"  ratio {impl} / HF: {median[impl] / median['hf']:.2f}x tokens/s, "
              f"{memory[impl] / memory['hf']:.2f}x peak extra memory")
    print(f"  training FLOPs/token: {d.train_flops_per_token / 1e6:,.1f} M with MLM logits at masked positions, "
          f"{d.dense_head_train_flops_per_token / 1e6:,.1f} M at every position (HF's work); GEMM calibration "
          f"[4096 x {hidden}] x [{hidden} x {4 * hidden}]: {gemm:,.1f} GFLOP/s")


if __name__ == "__main__":
    main()
