"""Pretraining step throughput on one CUDA GPU: our BertForPreTraining vs transformers' BertForPreTraining
(attn_implementation "sdpa"), BERT-base and BERT-large at sequence length 128 and 512, bf16 autocast, measured side
by side in one run: tokens/s, MFU against the GPU's peak dense bf16 FLOP/s, and peak GPU memory.

    python benchmarks/gpu_step.py                                  # base and large, seq 128 and 512
    python benchmarks/gpu_step.py --shape base --seq 128 --steps 50 --repeats 3
    python benchmarks/gpu_step.py --peak-tflops 989.4              # a GPU the peak table does not know

The protocol is benchmarks/pretrain_step.py's, with its batches and its timing loop (imported): each measurement
in a fresh subprocess, ours and HF alternating for --repeats rounds, the median tokens/s reported with the ratio.
A step is forward (under training/backends.py's bf16 autocast context, the trainer's) + backward + clip + AdamW +
zero_grad on full-length batches with BERT's prediction budget (20 masked tokens per sequence at 128, 80 at 512),
timed between torch.cuda.synchronize() calls. Batches hold 8,192 tokens (64 x 128, 16 x 512; --batch to change).
Peak memory is torch.cuda.max_memory_allocated over the warm-up and timed steps: weights, AdamW state, gradients
and activations.

MFU = tokens/s x training FLOPs per token / peak FLOP/s. The FLOPs are training/describe.py's (what the MFU in
metrics.jsonl uses): the matrix products of the step with MLM logits at the masked positions only, credited to
both implementations alike (HF computes logits at every position; that larger figure is printed, not credited).
The peak is the dense (no sparsity) bf16 tensor-core rate of NVIDIA's datasheet for the GPU torch names
(PEAK_BF16_TFLOPS), or --peak-tflops. Without a CUDA device the script exits with a message; without bf16
support (compute capability < 8.0) too. Needs `transformers` (a test dependency).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pretrain_step, also when imported by a test
from pretrain_step import _batch, time_training_steps  # noqa: E402

SHAPES = {
    # name: (hidden, layers, heads, intermediate, vocab)
    "base": (768, 12, 12, 3072, 30522),  # configs/bert-base.yaml
    "large": (1024, 24, 16, 4096, 30522),  # configs/bert-large.yaml
}
SEQ_LENS = (128, 512)
PREDICTIONS = {128: 20, 512: 80}  # BERT's max_predictions_per_seq at each length (configs/bert-base.yaml)
TOKENS_PER_STEP = 8192

# Dense bf16 tensor-core TFLOP/s (without 2:4 sparsity) from NVIDIA's datasheets; the first pattern matching the
# lower-cased torch.cuda.get_device_name() wins (so the NVL / PCIe variants come before their SXM part).
PEAK_BF16_TFLOPS: tuple[tuple[str, str, float], ...] = (
    (r"h100.*pcie", "H100 PCIe", 756.0),
    (r"h100.*nvl", "H100 NVL", 835.0),
    (r"h200.*nvl", "H200 NVL", 835.0),
    (r"gh200", "GH200", 989.4),
    (r"h200", "H200 SXM", 989.4),
    (r"h100", "H100 SXM", 989.4),  # torch names it "NVIDIA H100 80GB HBM3"
    (r"b200", "B200", 2250.0),
    (r"a100", "A100", 312.0),  # SXM and PCIe alike
    (r"l40s", "L40S", 362.0),
    (r"l40\b", "L40", 181.0),
    (r"\bl4\b", "L4", 121.0),
    (r"\ba10\b", "A10", 125.0),  # not the A10G (another rate): pass --peak-tflops for it
    (r"rtx 4090", "RTX 4090", 165.2),
)


def peak_for(device_name: str) -> tuple[str, float] | None:
    """(label, peak FLOP/s) of the GPU torch calls `device_name`, or None when the table does not know it."""
    name = device_name.lower()
    for pattern, label, tflops in PEAK_BF16_TFLOPS:
        if re.search(pattern, name):
            return label, tflops * 1e12
    return None


def resolve_peak(device_name: str, override_tflops: float | None) -> tuple[str, float | None]:
    """The peak to divide by: --peak-tflops when given, else the table's; (label, None) when neither exists."""
    if override_tflops is not None:
        return f"--peak-tflops {override_tflops:g}", override_tflops * 1e12
    found = peak_for(device_name)
    return found if found else (f"{device_name}: not in the peak table (pass --peak-tflops)", None)


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float | None) -> float | None:
    return tokens_per_s * flops_per_token / peak_flops if peak_flops else None


def cases(args: argparse.Namespace) -> list[tuple[str, int, int, int]]:
    """(shape, seq_len, batch, predictions per sequence) of every measurement, in order."""
    return [(shape, seq, args.batch or TOKENS_PER_STEP // seq, PREDICTIONS[seq])
            for shape in args.shape for seq in args.seq]


def measure(impl: str, dims: tuple[int, int, int, int, int], seq_len: int, batch: int, predictions: int,
            steps: int, warmup: int, device: str = "cuda") -> dict:
    """One measurement in this process (fresh, so that the peak memory is the step's own): tokens/s and peak GPU
    memory of `steps` steps of `impl` ("ours" or "hf") after `warmup` ones. On the CPU (the smoke test) the
    autocast context is fp32 and there is no GPU memory to report."""
    import torch

    from training.backends import autocast_context

    dev = torch.device(device)
    hidden, layers, heads, inter, vocab = dims
    data = {k: v.to(dev) for k, v in _batch(vocab, batch=batch, max_predictions=predictions, seq_len=seq_len).items()}
    torch.manual_seed(0)
    if impl == "ours":
        from training.models.bert.model import BertConfig, BertForPreTraining

        model = BertForPreTraining(BertConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers,
                                              num_heads=heads, intermediate_size=inter, max_position_embeddings=512))
        attention = "sdpa"

        def forward() -> torch.Tensor:
            return model(**data)["loss"]
    elif impl == "hf":
        import transformers

        cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                      num_attention_heads=heads, intermediate_size=inter, max_position_embeddings=512)
        model = transformers.BertForPreTraining._from_config(cfg, attn_implementation="sdpa")
        attention = model.config._attn_implementation
        labels = torch.full_like(data["input_ids"], -100).scatter(1, data["masked_positions"], data["masked_labels"])
        hf_inputs = {"input_ids": data["input_ids"], "token_type_ids": data["token_type_ids"],
                     "attention_mask": data["attention_mask"], "labels": labels,
                     "next_sentence_label": data["nsp_labels"]}

        def forward() -> torch.Tensor:
            return model(**hf_inputs).loss
    else:
        raise ValueError(f"impl must be 'ours' or 'hf', not {impl!r}")
    model.to(dev)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)

    def loss_of() -> torch.Tensor:
        with autocast_context(dev, bf16=True):
            return forward()

    out = time_training_steps(model, list(model.parameters()), loss_of, warmup, steps, batch * seq_len,
                              synchronize=torch.cuda.synchronize if cuda else None)
    out["peak_gpu_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None
    return {"impl": impl, "attention": attention, **out}


def flops_per_token(shape: str, seq_len: int, predictions: int) -> tuple[float, float]:
    """(training FLOPs per token credited: MLM logits at the masked positions; the same with logits everywhere)."""
    from training.config import ModelConfig
    from training.describe import describe

    hidden, layers, heads, inter, vocab = SHAPES[shape]
    d = describe(ModelConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter,
                             max_position_embeddings=512), vocab, seq_len, predictions / seq_len)
    return d.train_flops_per_token, d.dense_head_train_flops_per_token


def format_table(rows: list[dict], peak_flops: float | None) -> str:
    """The results, one line per (case, implementation) and a ratio line per case. A row: shape, seq_len, batch,
    impl, runs (tokens/s of each round), peak_gpu_mib (per round), flops_per_token, dense_flops_per_token."""
    header = (f"  {'shape':<6}{'seq':>5}{'batch':>7}  {'impl':<5}{'tokens/s':>12}{'MFU':>9}{'peak GiB':>10}"
              f"   runs (tokens/s)")
    lines = [header]
    by_case: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        median = statistics.median(row["runs"])
        memory = max(row["peak_gpu_mib"])
        share = mfu(median, row["flops_per_token"], peak_flops)
        by_case.setdefault((row["shape"], row["seq_len"], row["batch"]), {})[row["impl"]] = {
            "median": median, "memory": memory, "row": row}
        lines.append(f"  {row['shape']:<6}{row['seq_len']:>5}{row['batch']:>7}  {row['impl']:<5}{median:>12,.0f}"
                     f"{'n/a' if share is None else f'{100 * share:.1f} %':>9}{memory / 1024:>10.2f}   "
                     + ", ".join(f"{r:,.0f}" for r in row["runs"]))
    for (shape, seq, batch), impls in by_case.items():
        flops = next(iter(impls.values()))["row"]
        text = (f"  {shape} {seq}: training FLOPs/token {flops['flops_per_token'] / 1e9:.3f} G credited (MLM "
                f"logits at the masked positions), {flops['dense_flops_per_token'] / 1e9:.3f} G with logits at "
                f"every position (HF's work)")
        if {"ours", "hf"} <= impls.keys():
            ours, hf = impls["ours"], impls["hf"]
            text += (f"; ours / HF {ours['median'] / hf['median']:.2f}x tokens/s, "
                     f"{ours['memory'] / hf['memory']:.2f}x peak memory")
        lines.append(text)
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", nargs="+", choices=sorted(SHAPES), default=["base", "large"])
    parser.add_argument("--seq", nargs="+", type=int, choices=SEQ_LENS, default=list(SEQ_LENS))
    parser.add_argument("--batch", type=int, default=None,
                        help=f"sequences per step (default {TOKENS_PER_STEP:,} tokens: 64 at 128, 16 at 512)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of ours / HF")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="peak dense bf16 TFLOP/s of the GPU (default: from its name, PEAK_BF16_TFLOPS)")
    parser.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch is not None and args.batch < 1:
        parser.error("--batch must be >= 1")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        parser.error("--peak-tflops must be > 0")
    return args


def _no_gpu_reason() -> str | None:
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        return (f"gpu_step: torch {torch.__version__} ({build}) sees no CUDA device; this benchmark measures a GPU "
                f"step (benchmarks/pretrain_step.py is the CPU one)")
    if not torch.cuda.is_bf16_supported():
        return (f"gpu_step: {torch.cuda.get_device_name(0)} (compute capability {torch.cuda.get_device_capability(0)})"
                f" has no bf16 tensor cores; this benchmark measures bf16 autocast")
    return None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:  # one measurement: --worker IMPL --shape S --seq N (one each)
        shape, seq, batch, predictions = cases(args)[0]
        print(json.dumps(measure(args.worker, SHAPES[shape], seq, batch, predictions, args.steps, args.warmup)))
        return
    if (reason := _no_gpu_reason()) is not None:
        raise SystemExit(reason)
    import torch
    import transformers

    name = torch.cuda.get_device_name(0)
    label, peak = resolve_peak(name, args.peak_tflops)
    rows = []
    for shape, seq, batch, predictions in cases(args):
        runs: dict[str, list[dict]] = {"ours": [], "hf": []}
        for _ in range(args.repeats):
            for impl in runs:
                command = [sys.executable, os.path.abspath(__file__), "--worker", impl, "--shape", shape, "--seq",
                           str(seq), "--batch", str(batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
                out = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ))
                if out.returncode != 0:
                    raise SystemExit(f"gpu_step: the {impl} worker failed ({shape}, seq {seq}, batch {batch}):\n"
                                     f"{out.stderr[-3000:]}")
                runs[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
        credited, dense = flops_per_token(shape, seq, predictions)
        for impl, measured in runs.items():
            rows.append({"shape": shape, "seq_len": seq, "batch": batch, "impl": impl,
                         "runs": [m["tokens_per_s"] for m in measured],
                         "peak_gpu_mib": [m["peak_gpu_mib"] for m in measured],
                         "flops_per_token": credited, "dense_flops_per_token": dense,
                         "attention": measured[0]["attention"]})
    print(f"GPU {name} (peak {label}: {peak / 1e12:,.1f} TFLOP/s dense bf16)" if peak else f"GPU {name} ({label})")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, HF "
          f"attention {rows[-1]['attention']}; bf16 autocast, AdamW, fp32 weights; {args.repeats} x {args.steps} "
          f"steps after {args.warmup} warm-up; peak memory = max_memory_allocated")
    print(format_table(rows, peak))


if __name__ == "__main__":
    main()
