"""ELECTRA pretraining step throughput: our ElectraForPreTraining vs transformers' ElectraForMaskedLM generator +
ElectraForPreTraining discriminator (attn_implementation "sdpa") sharing the embedding block, same shapes, same
batches, same optimiser (AdamW), CPU fp32, measured side by side in one run.

    python benchmarks/electra_step.py --shape tiny              # configs/tiny-electra.yaml's model, batch 32 x 128
    python benchmarks/electra_step.py --shape small --steps 5   # ELECTRA-Small, batch 32 x 128

Each measurement runs in a fresh subprocess (so peak memory is the step's own), alternating ours / HF for
`--repeats` rounds; the median tokens/s of each is reported with the ratio. A step is: generator forward on the
masked batch (15 % of the tokens masked, at most 19 per sequence as the ELECTRA reference code), Gumbel sampling
of the replacements at the masked positions (no gradient), discriminator forward on the corrupted batch,
loss = MLM + 50 * BCE, backward, clip, AdamW, zero_grad. HF's generator computes MLM logits at every position
(its design); ours only at the masked ones. Needs `transformers` (a test dependency).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from pretrain_step import _batch as pretrain_batch
from pretrain_step import time_training_steps

SHAPES = {
    # name: (hidden, layers, heads, intermediate, embedding, vocab); generator = 1/4 of hidden, heads and FFN
    "tiny": (128, 2, 4, 512, 64, 8000),
    "small": (256, 12, 4, 1024, 128, 30522),
}
SEQ_LEN, MAX_PREDICTIONS, GENERATOR_SIZE, DISC_WEIGHT = 128, 19, 0.25, 50.0


def _batch(vocab: int, batch: int, seed: int = 0) -> dict:
    batch_dict = pretrain_batch(vocab, seed, batch, MAX_PREDICTIONS)
    del batch_dict["nsp_labels"]  # drawn after everything else: the other tensors are those of the BERT benchmark
    return batch_dict


def _ours(shape: str):
    from training.models.electra.model import ElectraConfig, ElectraForPreTraining

    hidden, layers, heads, inter, embedding, vocab = SHAPES[shape]
    model = ElectraForPreTraining(ElectraConfig(
        vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter,
        max_position_embeddings=512, embedding_size=embedding, generator_size=GENERATOR_SIZE, disc_weight=DISC_WEIGHT))
    return model, list(model.parameters()), lambda batch: model(**batch)["loss"]


def _hf(shape: str):
    import torch
    import transformers

    from training.models.electra.model import gumbel_sample, replace_masked

    hidden, layers, heads, inter, embedding, vocab = SHAPES[shape]

    def config(h: int, a: int, i: int):
        return transformers.ElectraConfig(vocab_size=vocab, embedding_size=embedding, hidden_size=h,
                                          num_hidden_layers=layers, num_attention_heads=a, intermediate_size=i,
                                          max_position_embeddings=512)

    disc = transformers.ElectraForPreTraining._from_config(config(hidden, heads, inter), attn_implementation="sdpa")
    gen = transformers.ElectraForMaskedLM._from_config(
        config(round(hidden * GENERATOR_SIZE), max(1, round(heads * GENERATOR_SIZE)), round(inter * GENERATOR_SIZE)),
        attn_implementation="sdpa")
    gen.electra.embeddings = disc.electra.embeddings  # ELECTRA shares the embedding block
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    params = list({id(p): p for p in (*disc.parameters(), *gen.parameters())}.values())
    disc.train()
    gen.train()

    def loss_of(batch: dict) -> torch.Tensor:
        ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
        positions, labels = batch["masked_positions"], batch["masked_labels"]
        dense_labels = torch.full_like(ids, -100).scatter(1, positions, labels)
        out = gen(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=dense_labels)
        with torch.no_grad():
            logits = out.logits.gather(1, positions[..., None].expand(-1, -1, vocab)).reshape(-1, vocab)
            sampled = gumbel_sample(logits)
            corrupted = replace_masked(ids, positions, labels, sampled)
            original = replace_masked(ids, positions, labels, labels.reshape(-1))
        replaced = (corrupted != original).long()
        d = disc(input_ids=corrupted, token_type_ids=types, attention_mask=mask, labels=replaced)
        return out.loss + DISC_WEIGHT * d.loss

    return disc, params, loss_of


def _worker(impl: str, shape: str, batch_size: int, steps: int, warmup: int) -> dict:
    import torch

    batch = _batch(SHAPES[shape][5], batch_size)
    torch.manual_seed(0)
    model, params, loss_of = _ours(shape) if impl == "ours" else _hf(shape)
    return {"impl": impl, **time_training_steps(model, list(params), lambda: loss_of(batch), warmup, steps,
                                                batch_size * SEQ_LEN)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--batch", type=int, default=32, help="sequences per step (of 128 tokens)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of ours / HF")
    parser.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.shape, args.batch, args.steps, args.warmup)))
        return

    import torch
    import transformers

    runs: dict[str, list[dict]] = {"ours": [], "hf": []}
    for _ in range(args.repeats):
        for impl in ("ours", "hf"):
            out = subprocess.run([sys.executable, __file__, "--worker", impl, "--shape", args.shape, "--batch",
                                  str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup)],
                                 capture_output=True, text=True, check=True, env=dict(os.environ))
            runs[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
    median = {impl: statistics.median(r["tokens_per_s"] for r in rs) for impl, rs in runs.items()}
    memory = {impl: statistics.median(r["peak_extra_mib"] for r in rs) for impl, rs in runs.items()}
    hidden, layers, heads, inter, embedding, vocab = SHAPES[args.shape]
    print(f"shape {args.shape}: discriminator {layers} layers, hidden {hidden}, heads {heads}, FFN {inter}, embeddings "
          f"{embedding}, vocab {vocab}; generator {GENERATOR_SIZE:g} of the width; batch {args.batch} x {SEQ_LEN}, "
          f"{MAX_PREDICTIONS} masked per sequence; torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{runs['ours'][0]['threads']} threads; {args.repeats} x {args.steps} steps")
    for impl in ("ours", "hf"):
        each = ", ".join(f"{r['tokens_per_s']:,.0f}" for r in runs[impl])
        print(f"  {impl:<5} {median[impl]:>10,.0f} tokens/s  (runs: {each})  peak extra memory "
              f"{memory[impl]:,.0f} MiB  parameters {runs[impl][0]['parameters']:,}")
    print(f"  ratio ours / HF: {median['ours'] / median['hf']:.2f}x tokens/s, "
          f"{memory['ours'] / memory['hf']:.2f}x peak extra memory")


if __name__ == "__main__":
    main()
