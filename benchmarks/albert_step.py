"""ALBERT pretraining step throughput: our BertForPreTraining under an ALBERT BertConfig (factorised embeddings,
all layers sharing one set of weights, objective mlm_sop) vs transformers' AlbertForPreTraining, same
architecture, same batches, same optimiser (AdamW), CPU fp32, measured side by side in one run.

    python benchmarks/albert_step.py --shape tiny            # configs/tiny-albert.yaml's model, batch 32 x 128
    python benchmarks/albert_step.py --shape base --steps 3  # ALBERT-base, batch 32 x 128 (slow on 2 cores)

HF runs with attn_implementation "sdpa" when its ALBERT supports it (transformers 5.x does), else "eager"; the
implementation actually used is printed. Both models run without dropout (ALBERT's setting; HF's
classifier_dropout_prob is set to 0 too). Each measurement runs in a fresh subprocess (so peak memory is the
step's own), alternating ours / HF for `--repeats` rounds; the median tokens/s of each is reported with the
ratio. A step is forward + backward + clip + AdamW + zero_grad on a full-length batch with 20 masked tokens per
sequence (MLM + SOP); HF computes MLM logits at every position, ours only at the masked ones (FLOPs per token of
both are printed). Batches, timing and memory are those of benchmarks/pretrain_step.py (imported from it).
Needs `transformers` (a test dependency): pip install -c constraints.txt transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from pretrain_step import BATCH, MAX_PREDICTIONS, SEQ_LEN, _batch, gemm_gflops, print_comparison, time_training_steps

SHAPES = {
    # name: (embedding, hidden, layers, heads, intermediate, vocab)
    "tiny": (64, 128, 4, 2, 512, 8000),  # configs/tiny-albert.yaml
    "base": (128, 768, 12, 12, 3072, 30000),  # configs/albert-base.yaml
}


def _worker(impl: str, shape: str, steps: int, warmup: int) -> dict:
    import torch

    embedding, hidden, layers, heads, inter, vocab = SHAPES[shape]
    batch = _batch(vocab)
    torch.manual_seed(0)
    attention = "ours (SDPA)"
    if impl == "ours":
        from training.models.bert.model import BertConfig, BertForPreTraining
        from training.objectives import get_objective

        model = BertForPreTraining(BertConfig(
            vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter,
            max_position_embeddings=512, embedding_size=embedding, share_layers="all", hidden_dropout=0.0,
            attention_dropout=0.0))
        objective = get_objective("mlm_sop")

        def loss_of() -> torch.Tensor:
            return objective(model, batch)["loss"]
    else:
        import transformers

        cfg = transformers.AlbertConfig(
            vocab_size=vocab, embedding_size=embedding, hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, intermediate_size=inter, max_position_embeddings=512, num_hidden_groups=1,
            inner_group_num=1, hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            classifier_dropout_prob=0.0)
        supports_sdpa = getattr(transformers.AlbertForPreTraining, "_supports_sdpa", False)
        model = transformers.AlbertForPreTraining._from_config(cfg, attn_implementation="sdpa" if supports_sdpa else "eager")
        attention = model.config._attn_implementation
        dense_labels = torch.full_like(batch["input_ids"], -100).scatter(1, batch["masked_positions"], batch["masked_labels"])
        hf_inputs = {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"],
                     "attention_mask": batch["attention_mask"], "labels": dense_labels,
                     "sentence_order_label": batch["nsp_labels"]}

        def loss_of() -> torch.Tensor:
            return model(**hf_inputs).loss
    return {"impl": impl, "attention": attention,
            **time_training_steps(model, list(model.parameters()), loss_of, warmup, steps, BATCH * SEQ_LEN)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of ours / HF")
    parser.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.shape, args.steps, args.warmup)))
        return

    import torch
    import transformers

    from training.config import ModelConfig
    from training.describe import describe

    embedding, hidden, layers, heads, inter, vocab = SHAPES[args.shape]
    d = describe(ModelConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter,
                             embedding_size=embedding, share_layers="all"),
                 vocab, SEQ_LEN, MAX_PREDICTIONS / SEQ_LEN, objective="mlm_sop")
    runs: dict[str, list[dict]] = {"ours": [], "hf": []}
    for _ in range(args.repeats):
        for impl in ("ours", "hf"):
            out = subprocess.run([sys.executable, __file__, "--worker", impl, "--shape", args.shape, "--steps",
                                  str(args.steps), "--warmup", str(args.warmup)],
                                 capture_output=True, text=True, check=True, env=dict(os.environ))
            runs[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
    gemm = gemm_gflops(hidden)
    median = {impl: statistics.median(r["tokens_per_s"] for r in rs) for impl, rs in runs.items()}
    memory = {impl: statistics.median(r["peak_extra_mib"] for r in rs) for impl, rs in runs.items()}
    print(f"shape {args.shape}: ALBERT, {layers} layers sharing all weights, embedding {embedding}, hidden {hidden}, "
          f"heads {heads}, FFN {inter}, vocab {vocab}; batch {BATCH} x {SEQ_LEN}, {MAX_PREDICTIONS} masked per "
          f"sequence, MLM + SOP; torch {torch.__version__}, transformers {transformers.__version__}, HF attention "
          f"{runs['hf'][0]['attention']}, {runs['ours'][0]['threads']} threads; {args.repeats} x {args.steps} steps; "
          f"parameters ours {runs['ours'][0]['parameters']:,}, HF {runs['hf'][0]['parameters']:,}")
    print_comparison(runs, median, memory, d, hidden, gemm)


if __name__ == "__main__":
    main()
