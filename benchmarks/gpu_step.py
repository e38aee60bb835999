"""Pretraining step throughput on one CUDA GPU: our BertForPreTraining vs transformers' BertForPreTraining
(attn_implementation "sdpa"), BERT-base and BERT-large at sequence length 128 and 512, bf16 autocast, measured side
by side in one run: tokens/s, MFU against the GPU's peak dense bf16 FLOP/s, and peak GPU memory.

    python benchmarks/gpu_step.py                                  # base and large, seq 128 and 512
    python benchmarks/gpu_step.py --shape base --seq 128 --steps 50 --repeats 3
    python benchmarks/gpu_step.py --peak-tflops 989.4              # a GPU the peak table does not know
    python benchmarks/gpu_step.py --all                            # the goals of issue 31 (under 8 minutes)

--all measures the cases of ALL_CASES, in this order (a run cut short by its time budget loses the last rows; the
first case is the one measured least so far), each goal printed next to its figure (met / not met):
- ModernBERT-base (configs/modernbert-base.yaml's model) at 1,024 tokens, 24 sequences (the recipe's micro-batch
  per process, batch_size 4,608 / 8 processes / grad_accumulation 24) with 308 predictions a row: >= 40 % MFU;
- BERT-base at 128 tokens, 256 sequences (32,768 tokens: configs/bert-base.yaml's batch_size): >= 45 % MFU;
- BERT-base at 128 tokens, 64 sequences (8,192 tokens a step, the protocol's default batch): >= 35 % MFU;
- ours compiled >= 1.5x transformers' same-size model (BertForPreTraining / ModernBertForMaskedLM, sdpa,
  eager) at the same batch.
Each case runs its implementations (CASE_IMPLS), each in a fresh subprocess, one after the other: `ours` (eager,
the recipe's default: sparse MLM head with boolean gather), `ours-compiled` (the GPU step of pretrain.compile with
pretrain.static_shapes: torch.compile'd model and loss, MLM logits at every prediction slot, no host read in the
step; BERT's cases), for ModernBERT `ours-compiled-unpad` (its recipe's GPU step: the same with pretrain.unpad, the
real tokens only through the varlen FlashAttention kernel, the local layers' window in the kernel instead of a
[T, T] mask; the packing reads the token count once a step) and `ours-compiled-fixed` (pretrain.unpad_layout
fixed: the same kernel over every slot, each row's padding a sequence of its own, nothing read on the host, one
shape; the only unpadded row that --compile-mode reduce-overhead measures), and `hf`. ModernBERT's padded compiled
step (24.3 % MFU on the H200, 2026-11-30) is no longer in --all (`--worker-case 0 --worker ours-compiled` measures
it alone). All of them: bf16 autocast, fp32 master weights, fused AdamW (training/optim.py's choice on CUDA, given
to transformers too: the optimiser is not what is compared), clip, zero_grad; a step reads nothing back.
--warmup steps (compilation included) then --windows timed windows of --window-steps steps; the median window's
tokens/s is reported, with every window's. Duration on one H200 (measured 2026-11-30, before the unpadded rows
and the prewarm): ~6.5 minutes for 9 subprocesses, most of it inductor compiling BERT-base twice (two batch shapes)
and ModernBERT-base once, 30-66 s each, one after the other; the timed steps themselves take seconds. Now 10
measurements (ModernBERT's two unpadded rows take the padded one's place and add one), and before any is timed the
four compiled ones are compiled together (--prewarm-jobs, default 4: warm-only workers, nothing timed, ~60 GB of
GPU memory at once), each leaving its graphs in inductor's caches (FX graph and AOTAutograd caches, forced on; the
directory is TORCHINDUCTOR_CACHE_DIR or inductor's default), so that each timed measurement loads them instead of
compiling: on the CPU at the tiny shape, 33-36 s cold (two at once) against 2.5 s loaded, every graph a cache hit
(`compile_cache` in the row). The table's `prewarm s` is a row's cold warm-up beside the others'. Its duration on a
GPU is not measured yet. A failed or hung measurement (--worker-timeout) is reported and the others still run; --json
keeps each row as it is measured. --profile-steps N (scripts/gpu_check.sh passes 3) profiles N more steps of each
of ours after its windows: the GPU time of a step by kernel and by kind of work (matrix products, attention,
inductor's Triton kernels, the optimiser, copies, the rest), printed as each row is measured and kept in its JSON
row, so that a lent GPU's one run also says where the time goes that the MFU goals miss.

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


# --all: (label, family, shape dims, seq_len, batch, predictions per sequence, MFU goal); the ratio goal is RATIO_GOAL
FAMILY_DIMS = {
    # family: (hidden, layers, heads, intermediate, vocab)
    "bert": SHAPES["base"],  # configs/bert-base.yaml
    "modernbert": (768, 22, 12, 1152, 50368),  # configs/modernbert-base.yaml (intermediate = each GeGLU half)
}
ALL_CASES: tuple[tuple[str, str, int, int, int, float], ...] = (
    ("modernbert-base", "modernbert", 1024, 24, 308, 0.40),
    ("bert-base", "bert", 128, 256, 20, 0.45),
    ("bert-base", "bert", 128, 64, 20, 0.35),
)
ALL_IMPLS = ("ours", "ours-compiled", "ours-compiled-unpad", "ours-compiled-fixed", "hf")
# each family's implementations in --all, in the order measured (ModernBERT's recipe trains unpadded; its padded
# compiled step, 24.3 % MFU on the H200 on 2026-11-30, is measured alone by --worker-case 0 --worker ours-compiled)
CASE_IMPLS = {"bert": ("ours", "ours-compiled", "hf"),
              "modernbert": ("ours", "ours-compiled-unpad", "ours-compiled-fixed", "hf")}
COMPILED_IMPLS = ("ours-compiled", "ours-compiled-unpad", "ours-compiled-fixed")
UNPADDED_IMPLS = {"ours-compiled-unpad": "packed", "ours-compiled-fixed": "fixed"}  # pretrain.unpad_layout
RATIO_GOAL = 1.5
TINY_DIMS = {"bert": (32, 1, 2, 64, 200), "modernbert": (32, 3, 2, 48, 256)}  # the CPU smoke test's


def case_shape(index: int, tiny: bool) -> dict:
    """ALL_CASES[index] as measured: family, dims, seq_len, batch, predictions, local_attention, device. `tiny`
    (--worker-tiny, hidden; the CPU tests of the subprocess path): TINY_DIMS at 32 tokens on the CPU, batch 2 + the
    case's index."""
    _, family, seq, batch, predictions, _ = ALL_CASES[index]
    if tiny:
        return {"family": family, "dims": TINY_DIMS[family], "seq_len": 32, "batch": 2 + index, "predictions": 4,
                "local_attention": 8, "device": "cpu"}
    return {"family": family, "dims": FAMILY_DIMS[family], "seq_len": seq, "batch": batch, "predictions": predictions,
            "local_attention": 128, "device": "cuda"}


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


def model_config(family: str, dims: tuple[int, int, int, int, int], seq_len: int, local_attention: int = 128):
    """The recipe `model` section (training.config.ModelConfig) of a --all case: BERT's, or ModernBERT-base's
    attention pattern and rotary bases. The tiny smoke shapes pass a smaller local window."""
    from training.config import ModelConfig

    hidden, layers, heads, inter, _ = dims
    if family == "bert":
        return ModelConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter,
                           max_position_embeddings=512)
    from training.models.modernbert.model import ModernBertSettings

    return ModelConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter,
                       max_position_embeddings=max(seq_len, 1024), type_vocab_size=1, hidden_dropout=0.0,
                       attention_dropout=0.0, layer_norm_eps=1e-5,
                       modernbert=ModernBertSettings(global_attn_every_n_layers=3, local_attention=local_attention,
                                                     global_rope_theta=160000.0, local_rope_theta=10000.0))


OBJECTIVES = {"bert": "mlm_nsp", "modernbert": "modernbert_mlm"}


def measure_case(impl: str, family: str, dims: tuple[int, int, int, int, int], seq_len: int, batch: int,
                 predictions: int, warmup: int, windows: int, window_steps: int, device: str = "cuda",
                 compile_mode: str = "default", local_attention: int = 128, profile_steps: int = 0,
                 warm_only: bool = False) -> dict:
    """One --all measurement in this process: `warmup` steps (compilation included), then `windows` timed windows
    of `window_steps` steps; tokens/s of each window, peak GPU memory, and the warm-up's seconds. On the CPU (the
    smoke test) the autocast context is fp32 and there is no GPU memory to report. `profile_steps` > 0: after the
    windows, that many more steps under torch.profiler, whose device time (CPU time without a GPU) by kernel and by
    kind of work is returned as `profile` (see `profile_summary`). `warm_only`: the warm-up alone, which leaves the
    compiled graphs in inductor's on-disk caches for the measurement that follows (--prewarm-jobs); returns its
    seconds and the cache counters. A compiled row also reports the caches' hits and misses (`compile_cache`)."""
    import time

    import torch

    from training.backends import autocast_context
    from training.models.registry import get_architecture
    from training.objectives import get_objective_spec
    from training.optim import adamw_kernel

    if impl not in ALL_IMPLS:
        raise ValueError(f"impl must be one of {', '.join(ALL_IMPLS)}, not {impl!r}")
    dev = torch.device(device)
    vocab = dims[-1]
    data = {k: v.to(dev) for k, v in _batch(vocab, batch=batch, max_predictions=predictions, seq_len=seq_len).items()}
    if family == "modernbert":
        data["token_type_ids"] = torch.zeros_like(data["token_type_ids"])  # no segments
    cfg = model_config(family, dims, seq_len, local_attention)
    torch.manual_seed(0)
    if impl.startswith("ours"):
        arch = get_architecture(get_objective_spec(OBJECTIVES[family]).architecture)
        model = arch.build(arch.from_model_config(cfg, vocab, 0))
        untrained = set(model.untrained_parameter_names())  # ModernBERT's [CLS] pooler: frozen, as the trainer does
        for name, param in model.named_parameters():
            param.requires_grad_(name not in untrained)
        nsp = data["nsp_labels"] if family == "bert" else None
        inputs = (data["input_ids"], data["token_type_ids"], data["attention_mask"], data["masked_positions"],
                  data["masked_labels"], nsp)
        attention = "sdpa"
        if impl in COMPILED_IMPLS:  # what build_model does for pretrain.compile + pretrain.static_shapes (+ unpad)
            model.static_shapes = True
            model.unpad_by_default = impl in UNPADDED_IMPLS
            model.unpad_layout = UNPADDED_IMPLS.get(impl, "packed")
            model.compile(**({} if compile_mode == "default" else {"mode": compile_mode}))

        def forward() -> torch.Tensor:
            return model(*inputs)["loss"]
    else:
        import transformers

        labels = torch.full_like(data["input_ids"], -100).scatter(1, data["masked_positions"], data["masked_labels"])
        if family == "bert":
            hidden, layers, heads, inter, _ = dims
            hf_cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                             num_attention_heads=heads, intermediate_size=inter,
                                             max_position_embeddings=512)
            model = transformers.BertForPreTraining._from_config(hf_cfg, attn_implementation="sdpa")
            hf_inputs = {"input_ids": data["input_ids"], "token_type_ids": data["token_type_ids"],
                         "attention_mask": data["attention_mask"], "labels": labels,
                         "next_sentence_label": data["nsp_labels"]}
        else:
            from training.hf.modernbert import hf_modernbert_config

            ours_cfg = get_architecture("ModernBertForMaskedLM").from_model_config(cfg, vocab, 0)
            doc = hf_modernbert_config(ours_cfg, {"cls": 2, "sep": 3})
            doc = {k: v for k, v in doc.items() if k not in ("model_type", "architectures")}
            model = transformers.ModernBertForMaskedLM._from_config(transformers.ModernBertConfig(**doc),
                                                                     attn_implementation="sdpa")
            hf_inputs = {"input_ids": data["input_ids"], "attention_mask": data["attention_mask"], "labels": labels}
        attention = model.config._attn_implementation

        def forward() -> torch.Tensor:
            return model(**hf_inputs).loss
    model.to(dev).train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, **adamw_kernel(params))
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)

    def step() -> None:  # nothing read back: the device runs ahead of the host
        with autocast_context(dev, bf16=True):
            loss = forward()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - started
    cache = compile_cache_counters() if impl in COMPILED_IMPLS else None
    if warm_only:
        return {"impl": impl, "warmup_s": warmup_s, "compile_cache": cache}
    rates = []
    for _ in range(windows):
        started = time.perf_counter()
        for _ in range(window_steps):
            step()
        sync()
        rates.append(window_steps * batch * seq_len / (time.perf_counter() - started))
    out = {"impl": impl, "attention": attention, "windows": rates, "tokens_per_s": statistics.median(rates),
           "warmup_s": warmup_s, "peak_gpu_mib": torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None,
           "parameters": sum(p.numel() for p in params),
           "device_name": torch.cuda.get_device_name(dev) if cuda else dev.type}
    if cache is not None:
        out["compile_cache"] = cache
    if profile_steps > 0:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        try:
            with profile(activities=activities) as prof:
                for _ in range(profile_steps):
                    step()
                sync()
            out["profile"] = profile_summary(prof.key_averages(), profile_steps, cuda)
        except Exception as err:  # the row is measured already: a profiler that fails must not cost it
            out["profile_error"] = f"{type(err).__name__}: {err}"[:500]
    return out


def compile_cache_counters() -> dict[str, int]:
    """This process's hits and misses of inductor's compiled-graph cache (FX graph cache) and of AOTAutograd's
    cache so far: a measurement after --prewarm-jobs should hit and not miss."""
    from torch._dynamo.utils import counters

    return {"fx_graph_hits": counters["inductor"]["fxgraph_cache_hit"],
            "fx_graph_misses": counters["inductor"]["fxgraph_cache_miss"],
            "autograd_hits": counters["aot_autograd"]["autograd_cache_hit"],
            "autograd_misses": counters["aot_autograd"]["autograd_cache_miss"]}


# kinds of work in a step, by the names of CUDA kernels (cuBLAS / CUTLASS GEMMs, FlashAttention and the
# memory-efficient attention, inductor's Triton kernels) and of the CPU's aten operators; the first match wins
KERNEL_KINDS: tuple[tuple[str, str], ...] = (
    ("attention", r"flash|fmha|attention|attn"),
    ("matmul", r"gemm|cutlass|xmma|cublas|sm\d+_|ampere_|hopper|aten::(mm|addmm|addmm_|bmm|baddbmm|linear)$"),
    ("optimizer and clipping", r"adam|lamb|multi_tensor|foreach|norm_kernel"),
    ("triton (inductor's fused element-wise and reductions)", r"triton"),
    ("copies and fills", r"copy|memcpy|memset|fill|cat|index|scatter|gather|embedding"),
)


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    for kind, pattern in KERNEL_KINDS:
        if re.search(pattern, lowered):
            return kind
    return "other element-wise and reductions"


def profile_summary(events, steps: int, cuda: bool, top: int = 25) -> dict:
    """torch.profiler's key averages of `steps` steps -> {steps, clock ("device" or "cpu"), ms_per_step (the kernels'
    summed self time per step), kinds: {kind: share of that time}, top: [[name, ms per step, calls per step], ...]}.
    On CUDA only the kernels count (their self time on the GPU; the CPU-side operators that launched them would count
    the same work twice); without a GPU, the operators' self CPU time."""
    rows = []
    for event in events:
        if cuda:
            if getattr(event.device_type, "name", str(event.device_type)) != "CUDA":
                continue
            micros = getattr(event, "self_device_time_total", None)
            if micros is None:
                micros = event.self_cuda_time_total
        else:
            micros = event.self_cpu_time_total
        if micros > 0:
            rows.append((event.key, micros / 1e3 / steps, event.count / steps))
    total = sum(ms for _, ms, _ in rows) or 1.0
    kinds: dict[str, float] = {}
    for name, ms, _ in rows:
        kind = kernel_kind(name)
        kinds[kind] = kinds.get(kind, 0.0) + ms / total
    rows.sort(key=lambda row: -row[1])
    return {"steps": steps, "clock": "device" if cuda else "cpu", "ms_per_step": total,
            "kinds": dict(sorted(kinds.items(), key=lambda item: -item[1])),
            "top": [[name[:120], round(ms, 4), round(calls, 2)] for name, ms, calls in rows[:top]]}


def format_profile(row: dict, top: int = 12) -> str:
    """A measured row's `profile` as text: the kinds of work with their shares, then the costliest kernels."""
    summary = row["profile"]
    lines = [f"  profile of {row['label']} {row['seq_len']} x {row['batch']} {row['impl']}: "
             f"{summary['ms_per_step']:.2f} ms of {summary['clock']} time a step over {summary['steps']} steps; "
             + ", ".join(f"{kind} {100 * share:.1f} %" for kind, share in summary["kinds"].items())]
    lines += [f"    {ms:9.3f} ms {calls:7.1f}x  {name}" for name, ms, calls in summary["top"][:top]]
    return "\n".join(lines)


def case_flops(family: str, dims: tuple[int, int, int, int, int], seq_len: int, predictions: int,
               local_attention: int = 128) -> tuple[float, float]:
    """(training FLOPs per token credited: MLM logits at the masked positions; the same with logits everywhere),
    training/describe.py's for the case's objective."""
    from training.describe import describe

    d = describe(model_config(family, dims, seq_len, local_attention), dims[-1], seq_len, predictions / seq_len,
                 OBJECTIVES[family])
    return d.train_flops_per_token, d.dense_head_train_flops_per_token


def verdict(value: float | None, goal: float) -> str:
    return "n/a" if value is None else ("met" if value >= goal else "NOT met")


def case_ratios(impls: dict[str, dict]) -> list[tuple[str, float | None, float | None, float | None]]:
    """One case's rows by implementation -> per compiled implementation measured: (name, its tokens/s over ours
    eager, over transformers', its peak memory over transformers'), None where a row is missing."""
    out = []
    for name in COMPILED_IMPLS:
        if (compiled := impls.get(name)) is None:
            continue
        eager, hf = impls.get("ours"), impls.get("hf")
        memory = (compiled["peak_gpu_mib"] / hf["peak_gpu_mib"]
                  if hf and compiled["peak_gpu_mib"] and hf["peak_gpu_mib"] else None)
        out.append((name, compiled["tokens_per_s"] / eager["tokens_per_s"] if eager else None,
                    compiled["tokens_per_s"] / hf["tokens_per_s"] if hf else None, memory))
    return out


def format_markdown(rows: list[dict], peak_label: str, peak_flops: float | None) -> str:
    """--all's rows (its --json file) as benchmarks/RESULTS.md's tables: a line per measurement, the ratios per case
    against the goal, and each profiled row's GPU time by kind of work and its costliest kernels."""
    names = sorted({row.get("device_name", "?") for row in rows})
    lines = [f"Device: {', '.join(names)}; peak {peak_label}" + (f" = {peak_flops / 1e12:,.1f} TFLOP/s dense bf16"
                                                                  if peak_flops else ""), "",
             "| case | impl | tokens/s | MFU | goal | peak GiB | warm-up s | prewarm s | windows (tokens/s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    by_case: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        key = (row["label"], row["seq_len"], row["batch"])
        case = "" if key in by_case else f"{row['label']} {row['seq_len']:,} x {row['batch']} " \
                                          f"({row['seq_len'] * row['batch']:,} tokens)"
        by_case.setdefault(key, {})[row["impl"]] = row
        share = mfu(row["tokens_per_s"], row["flops_per_token"], peak_flops)
        goal = (f">= {100 * row['mfu_goal']:.0f} % {verdict(share, row['mfu_goal'])}"
                if row["impl"] in COMPILED_IMPLS else "")
        memory = "n/a" if row["peak_gpu_mib"] is None else f"{row['peak_gpu_mib'] / 1024:.2f}"
        prewarm_s = "" if row.get("prewarm_s") is None else f"{row['prewarm_s']:.1f}"
        lines.append(f"| {case} | {row['impl']} | {row['tokens_per_s']:,.0f} | "
                     f"{'n/a' if share is None else f'{100 * share:.1f} %'} | {goal} | {memory} | "
                     f"{row['warmup_s']:.1f} | {prewarm_s} | " + " / ".join(f"{r:,.0f}" for r in row["windows"]) + " |")
    lines.append("")
    for (label, seq, batch), impls in by_case.items():
        parts = []
        for name, vs_eager, vs_hf, memory in case_ratios(impls):
            text = f"{name}: " + ("" if vs_eager is None else f"{vs_eager:.2f}x eager")
            if vs_hf is not None:
                text += (", " if vs_eager is not None else "") + \
                    f"**{vs_hf:.2f}x** transformers (goal >= {RATIO_GOAL}x {verdict(vs_hf, RATIO_GOAL)})"
                if memory is not None:
                    text += f", {memory:.2f}x its peak memory"
            parts.append(text)
        if parts:
            lines.append(f"- {label} {seq:,} x {batch}: " + "; ".join(parts))
    profiled = [row for row in rows if "profile" in row]
    for row in profiled:
        summary = row["profile"]
        lines += ["", f"{row['label']} {row['seq_len']:,} x {row['batch']} {row['impl']}: {summary['ms_per_step']:.2f} ms "
                  f"of {summary['clock']} time a step ({summary['steps']} steps profiled): "
                  + ", ".join(f"{kind} {100 * share:.1f} %" for kind, share in summary["kinds"].items()), "",
                  "| ms a step | calls a step | kernel |", "|---|---|---|"]
        lines += [f"| {ms:.3f} | {calls:g} | `{name}` |" for name, ms, calls in summary["top"][:8]]
    return "\n".join(lines)


def format_all_table(rows: list[dict], peak_flops: float | None) -> str:
    """--all's results: a line per (case, implementation) with tokens/s (median window), MFU and its goal, peak
    memory and the windows; a line per case with ours-compiled / ours and ours-compiled / HF against the ratio
    goal (each compiled implementation, unpadded ModernBERT's too). A row: label, seq_len, batch, impl, tokens_per_s,
    windows, peak_gpu_mib, warmup_s, flops_per_token, mfu_goal, and prewarm_s where --prewarm-jobs compiled it
    first (its cold warm-up, beside the others; warmup_s is then the warm-up that loaded the cached graphs)."""
    lines = [f"  {'case':<16}{'seq':>5}{'batch':>6}  {'impl':<20}{'tokens/s':>12}{'MFU':>8}  {'goal':<17}"
             f"{'peak GiB':>9}{'warm-up s':>10}{'prewarm s':>10}   windows (tokens/s)"]
    by_case: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        share = mfu(row["tokens_per_s"], row["flops_per_token"], peak_flops)
        goal = ""
        if row["impl"] in COMPILED_IMPLS:
            goal = f">= {100 * row['mfu_goal']:.0f} % {verdict(share, row['mfu_goal'])}"
        memory = "n/a" if row["peak_gpu_mib"] is None else f"{row['peak_gpu_mib'] / 1024:.2f}"
        by_case.setdefault((row["label"], row["seq_len"], row["batch"]), {})[row["impl"]] = row
        lines.append(f"  {row['label']:<16}{row['seq_len']:>5}{row['batch']:>6}  {row['impl']:<20}"
                     f"{row['tokens_per_s']:>12,.0f}{'n/a' if share is None else f'{100 * share:.1f} %':>8}  "
                     f"{goal:<17}{memory:>9}{row['warmup_s']:>10.1f}"
                     f"{'-' if row.get('prewarm_s') is None else format(row['prewarm_s'], '.1f'):>10}   "
                     + ", ".join(f"{r:,.0f}" for r in row["windows"]))
    for (label, seq, batch), impls in by_case.items():
        text = f"  {label} {seq} x {batch}:"
        for name, vs_eager, vs_hf, memory in case_ratios(impls):
            if vs_eager is not None:
                text += f" {name} / eager {vs_eager:.2f}x;"
            if vs_hf is not None:
                text += f" {name} / HF {vs_hf:.2f}x (goal >= {RATIO_GOAL}x {verdict(vs_hf, RATIO_GOAL)})"
                if memory is not None:
                    text += f", {memory:.2f}x peak memory"
                text += ";"
        lines.append(text + f" {next(iter(impls.values()))['flops_per_token'] / 1e9:.3f} G training FLOPs/token")
    return "\n".join(lines)


def measurement_plan(args: argparse.Namespace) -> list[tuple[int, str]]:
    """--all's measurements in order: (index into ALL_CASES, implementation)."""
    plan = []
    for index, (_, family, *_rest) in enumerate(ALL_CASES):
        for impl in CASE_IMPLS[family]:
            if impl == "ours-compiled-unpad" and args.compile_mode != "default":
                continue  # as pretrain.compile_mode refuses unpad's packed layout: a shape per batch, a graph each
            plan.append((index, impl))
    return plan


def worker_command(args: argparse.Namespace, index: int, impl: str, warm_only: bool = False) -> list[str]:
    command = [sys.executable, os.path.abspath(__file__), "--worker-case", str(index), "--worker", impl,
               "--warmup", str(args.warmup), "--windows", str(args.windows), "--window-steps",
               str(args.window_steps), "--compile-mode", args.compile_mode]
    if args.worker_tiny:
        command.append("--worker-tiny")
    if warm_only:
        command.append("--warm-only")
    elif impl.startswith("ours") and args.profile_steps:
        command += ["--profile-steps", str(args.profile_steps)]
    return command


def worker_env() -> dict[str, str]:
    # inductor's compiled-graph caches on (the default of recent torch; said explicitly for older images), shared
    # by every worker through TORCHINDUCTOR_CACHE_DIR or inductor's default /tmp/torchinductor_$USER
    return {**os.environ, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}


def run_worker(args: argparse.Namespace, index: int, impl: str, warm_only: bool = False) -> tuple[dict | None, str | None]:
    """One worker subprocess -> (its JSON result, None) or (None, why it failed)."""
    try:
        out = subprocess.run(worker_command(args, index, impl, warm_only), capture_output=True, text=True,
                             env=worker_env(), timeout=args.worker_timeout)
    except subprocess.TimeoutExpired:
        return None, f"no result within --worker-timeout {args.worker_timeout:g} s"
    if out.returncode != 0:
        return None, f"exit {out.returncode}:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def prewarm(args: argparse.Namespace, jobs: list[tuple[int, str]]) -> dict[tuple[int, str], dict]:
    """Compile every compiled measurement of `jobs` before any is timed, --prewarm-jobs at a time, each in a
    subprocess that runs the warm-up alone: inductor's compilation is CPU work, a few minutes in all when the rows
    compile one after the other, and the processes leave their graphs in inductor's caches, from which the timed
    measurements then load them. Nothing is timed while these run. -> {(index, impl): the warm-only result}; a
    failed one is printed and left to its measurement, which then compiles for itself."""
    from concurrent.futures import ThreadPoolExecutor

    compiled = [job for job in jobs if job[1] in COMPILED_IMPLS]
    if args.prewarm_jobs <= 0 or not compiled:
        return {}
    import time

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.prewarm_jobs) as pool:
        results = list(pool.map(lambda job: run_worker(args, *job, warm_only=True), compiled))
    warmed = {}
    for (index, impl), (result, error) in zip(compiled, results):
        label, _, seq, batch, *_ = ALL_CASES[index]
        if error is not None:
            print(f"  prewarm of {label} {seq} x {batch} {impl} failed (its measurement compiles for itself): "
                  f"{error}", flush=True)
            continue
        warmed[(index, impl)] = result
        print(f"  prewarmed {label} {seq} x {batch} {impl}: warm-up {result['warmup_s']:.0f} s cold", flush=True)
    print(f"  prewarm: {len(warmed)} of {len(compiled)} compiled measurements, {args.prewarm_jobs} at a time, in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return warmed


def run_all(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """Every ALL_CASES case x its CASE_IMPLS, each measurement in a fresh subprocess (its own peak memory), one after
    the other on the same GPU, the compiled ones first compiled concurrently (`prewarm`). A worker that fails or
    outlasts --worker-timeout is reported and the others still run (a lent GPU's minutes are too few to lose the
    whole table to one case); returns the rows and the failures. With --json, each row is appended to that file as
    it is measured (JSON lines), so a run stopped part-way keeps what it measured."""
    rows, failures = [], []
    plan = measurement_plan(args)
    warmed = prewarm(args, plan)
    for index, impl in plan:
        label, goal = ALL_CASES[index][0], ALL_CASES[index][-1]
        shape = case_shape(index, args.worker_tiny)
        seq, batch = shape["seq_len"], shape["batch"]
        credited, _ = case_flops(shape["family"], shape["dims"], seq, shape["predictions"], shape["local_attention"])
        measured, error = run_worker(args, index, impl)
        if error is not None:
            failures.append(f"{label} {seq} x {batch} {impl}: {error}")
            print(f"  FAILED {label} {seq} x {batch} {impl}: {error}", flush=True)
            continue
        row = {"label": label, "seq_len": seq, "batch": batch, "flops_per_token": credited, "mfu_goal": goal,
               **measured}
        if (index, impl) in warmed:
            row["prewarm_s"] = warmed[(index, impl)]["warmup_s"]
        rows.append(row)
        if args.json:
            with open(args.json, "a") as handle:
                handle.write(json.dumps(row) + "\n")
        print(f"  measured {label} {seq} x {batch} {impl}: {measured['tokens_per_s']:,.0f} tokens/s "
              f"(warm-up {measured['warmup_s']:.0f} s)", flush=True)
        if "profile" in row:
            print(format_profile(row), flush=True)
        elif "profile_error" in row:
            print(f"  profile of {label} {seq} x {batch} {impl} failed: {row['profile_error']}", flush=True)
    return rows, failures


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
    parser.add_argument("--all", action="store_true",
                        help="the issue-31 goals: ALL_CASES x CASE_IMPLS, goals printed (see above)")
    parser.add_argument("--windows", type=int, default=3, help="--all: timed windows per measurement (median)")
    parser.add_argument("--window-steps", type=int, default=10, help="--all: steps per timed window")
    parser.add_argument("--compile-mode", default="default",
                        choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"],
                        help="--all: torch.compile mode of the compiled rows (pretrain.compile uses the default)")
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="--all: after the timed windows, profile this many more steps of each of ours "
                             "(device time by kernel and by kind of work, printed and kept in --json)")
    parser.add_argument("--worker-timeout", type=float, default=300.0,
                        help="--all: seconds one measurement (its subprocess, compilation included) may take")
    parser.add_argument("--json", default=None,
                        help="--all: append each measured row to this file as a JSON line as soon as it is measured")
    parser.add_argument("--prewarm-jobs", type=int, default=4,
                        help="--all: compile the compiled measurements this many at a time before any is timed "
                             "(they then load their graphs from inductor's caches); 0 = each compiles in its turn")
    parser.add_argument("--markdown", default=None, metavar="ROWS_JSONL",
                        help="print the rows of an --all --json file as RESULTS.md's tables (no GPU needed; the "
                             "peak from the rows' device name, or --peak-tflops)")
    parser.add_argument("--worker", choices=list(ALL_IMPLS), help=argparse.SUPPRESS)
    parser.add_argument("--worker-case", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-tiny", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.profile_steps < 0:
        parser.error("--profile-steps must be >= 0")
    if args.prewarm_jobs < 0:
        parser.error("--prewarm-jobs must be >= 0")
    if args.all and (args.windows < 3 or args.window_steps < 1):
        parser.error("--all needs --windows >= 3 and --window-steps >= 1")
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
    if args.markdown:
        with open(args.markdown) as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        if not rows:
            raise SystemExit(f"gpu_step: {args.markdown} holds no measured row")
        label, peak = resolve_peak(rows[0].get("device_name", "unknown"), args.peak_tflops)
        print(format_markdown(rows, label, peak))
        return
    if args.worker_case is not None:  # one --all measurement: --worker IMPL --worker-case INDEX
        shape = case_shape(args.worker_case, args.worker_tiny)
        print(json.dumps(measure_case(args.worker, shape["family"], shape["dims"], shape["seq_len"], shape["batch"],
                                      shape["predictions"], args.warmup, args.windows, args.window_steps,
                                      device=shape["device"], compile_mode=args.compile_mode,
                                      local_attention=shape["local_attention"], profile_steps=args.profile_steps,
                                      warm_only=args.warm_only)))
        return
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
    if args.all:
        import time

        started = time.perf_counter()
        rows, failures = run_all(args)
        print(f"GPU {name} (peak {label}: {peak / 1e12:,.1f} TFLOP/s dense bf16)" if peak else f"GPU {name} ({label})")
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}; bf16 "
              f"autocast, fp32 weights, fused AdamW; {args.warmup} warm-up steps, median of {args.windows} windows x "
              f"{args.window_steps} steps; compile mode {args.compile_mode}; peak memory = max_memory_allocated")
        print(format_all_table(rows, peak))
        print(f"  --all took {time.perf_counter() - started:.0f} s")
        if failures:
            raise SystemExit("gpu_step: measurements that failed:\n" + "\n".join(failures))
        return
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
