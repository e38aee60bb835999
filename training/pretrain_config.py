"""The `pretrain` section of a recipe (PretrainConfig): device, parallelism, batch, steps, optimiser, schedule,
logging and checkpoints, with the cross-checks that need this section alone (errors at load time, naming the keys).

    from training.pretrain_config import PretrainConfig
    cfg = PretrainConfig(batch_size=16, max_steps=100)   # or a recipe's `pretrain:` mapping via model_validate

Defaults are BERT-base's pretraining as in Devlin et al. 2019 (batch 256, 1M steps, Adam lr 1e-4, betas
0.9/0.999, weight decay 0.01, 10k warmup steps then linear decay). Checks that need the model section as well
are training/recipe_checks.py (called by flows/recipe.py's Recipe validator); checks that need facts of the run
(world size, shard lengths) are training/run_checks.py, when pretraining starts.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from bertfactory.config import StrictModel, did_you_mean

from .batch_ramp_config import BatchRampConfig
from .fsdp_config import FsdpConfig
from .models.members import objective_info, objective_names
from .stacking_config import StackingConfig
from .stream_config import stream_batches_problem
from .tracking import TrackingConfig


class PretrainConfig(StrictModel):
    """How to pretrain: device, batch, steps, optimiser, schedule, logging and checkpoints."""

    device: Literal["auto", "cpu", "cuda", "xla"] = Field(
        "auto", description="the backend: auto = cuda when available, else cpu; xla = TPU (or XLA on the CPU with "
                            "PJRT_DEVICE=CPU) through torch-xla, in the .venv-xla environment of scripts/xla_env.sh; "
                            "needs static_shapes (training/xla.py)")
    parallelism: Literal["ddp", "fsdp"] = Field(
        "ddp", description="how several processes (torchrun) share the model: ddp = a full replica per process, "
                           "gradients all-reduced; fsdp = parameters, gradients and optimiser state sharded over the "
                           "processes (FSDP2, training/fsdp.py: for members too large to replicate). Same trajectory "
                           "and checkpoints either way (a run may resume under the other); docs/parallelism.md")
    fsdp: FsdpConfig = Field(default_factory=FsdpConfig, description="parallelism fsdp: mixed precision on CUDA "
                             "and resharding (training/fsdp_config.py)")
    xla_spmd: bool = Field(False, description="xla: data-parallel over every XLA device of the process with SPMD "
                           "(TPU chips/cores; CPU_NUM_DEVICES=N virtual devices with PJRT_DEVICE=CPU): each batch "
                           "sharded on its batch dimension, parameters replicated, gradients all-reduced by the SPMD "
                           "partitioner; trains as one device with the whole batch_size (training/xla.py). "
                           "batch_size must be a multiple of the device count")
    xla_cache_dir: str | None = Field(None, description="xla: torch-xla's persistent compilation cache directory "
                                      "(compiled graphs reused by later runs); null = no cache")
    loader_workers: int = Field(0, ge=0, description="threads building the batches of the next steps while the "
                                "model trains (training/prefetch.py); 0 = built in the training loop. The batches "
                                "are the same whatever the number")
    bf16: bool = Field(True, description="bf16 autocast on CUDA (ignored on CPU, which trains in fp32 for exact reproducibility)")
    num_threads: int | None = Field(None, ge=1, description="CPU threads for torch (null = torch's default)")
    seed: int = Field(12345, ge=0, description="seed of weight init, dropout and data order")
    objective: str = Field("mlm_nsp", description="training objective (training/objectives): mlm_nsp (BERT), mlm "
                           "(RoBERTa), and the other members' objectives; `bertfactory describe --objectives` lists them")
    batch_size: int = Field(256, ge=1, description="sequences per optimiser step")
    batch_size_ramp: BatchRampConfig | None = Field(None, description="grow the global batch linearly from "
                                                    "start_batch_size to batch_size over the first `steps` steps "
                                                    "(training/batch_ramp.py); null = batch_size from the start")
    max_steps: int = Field(1_000_000, ge=1, description="optimiser steps in total")
    learning_rate: float = Field(1e-4, gt=0.0, description="peak learning rate (after warmup)")
    warmup_steps: int = Field(10_000, ge=0, description="linear warmup steps from 0 to learning_rate; then the schedule's (linear: decay to 0 at max_steps)")
    freeze_encoder_steps: int = Field(
        0, ge=0, description="head warm-up: for the first N optimiser steps train only what is not the model's "
        "encoder (its backbone(): embeddings, layers, pooler), e.g. a fresh MLM head on a published encoder (TAPT). "
        "BERT's MLM decoder is the word-embedding matrix (tied): it stays frozen with the embeddings, so the "
        "warm-up trains the head's transform (dense, LayerNorm) and output bias only. Frozen tensors get no "
        "gradient, no optimiser state, no weight decay (training/freeze.py); from step N on everything trains, "
        "along the same learning-rate schedule (its warmup counts from step 0). Must be < max_steps; 0 = none")
    weight_decay: float = Field(0.01, ge=0.0, description="AdamW decoupled weight decay (not on biases and LayerNorm weights)")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam beta1, beta2")
    eps: float = Field(1e-6, gt=0.0, description="Adam epsilon")
    max_grad_norm: float = Field(1.0, gt=0.0, description="clip the global gradient norm to this value")
    optimizer: Literal["adamw", "lamb", "adafactor"] = Field(
        "adamw", description="adamw (BERT), lamb (NVIDIA apex FusedLAMB: layer-wise trust ratio, none on biases and "
                             "LayerNorm) or adafactor (torch.optim.Adafactor: factored second moments; learning_rate "
                             "caps its relative step size); see training/optim.py")
    schedule: Literal["linear", "constant", "slanted_triangular", "one_cycle", "wsd"] = Field(
        "linear", description="learning-rate schedule after/with the warmup_steps: linear decay to 0 at max_steps "
                              "(BERT), constant, slanted_triangular (ULMFiT, cut = warmup_steps), one_cycle "
                              "(cosine up over warmup_steps, cosine down to the end of the budget) or wsd "
                              "(warmup-stable-decay, ModernBERT: constant after the warmup, then a 1-sqrt decay to 0 "
                              "over the last wsd_decay_fraction of max_steps)")
    stlr_ratio: float = Field(32.0, ge=1.0, description="slanted_triangular: ULMFiT's ratio of the peak to the lowest "
                              "learning rate")
    one_cycle_div_factor: float = Field(25.0, ge=1.0, description="one_cycle: the first learning rate is "
                                        "learning_rate / this")
    one_cycle_final_div_factor: float = Field(1e4, ge=1.0, description="one_cycle: the last learning rate is the "
                                              "first / this")
    wsd_decay_fraction: float = Field(0.1, gt=0.0, le=1.0, description="wsd: the share of max_steps (rounded to "
                                      "steps) at the end of the run over which the learning rate decays from "
                                      "learning_rate to 0 along 1 - sqrt(progress); the decay never starts before "
                                      "the warmup ends")
    grad_accumulation: int = Field(1, ge=1, description="micro-batches per optimiser step: each step's batch_size "
                                   "sequences (the global batch) run forward/backward in this many equal slices, "
                                   "weighted so the update equals the one of the whole batch; must divide batch_size")
    spike_factor: float | None = Field(None, gt=1.0, description="skip the update of a step whose loss exceeds this "
                                       "factor times the median of the last 100 accepted losses (null = only "
                                       "non-finite losses and gradient norms are skipped)")
    max_skipped_steps: int = Field(20, ge=0, description="stop with an error once more than this many steps in total "
                                   "had their update skipped (non-finite loss or gradient norm, loss spike)")
    max_consecutive_skipped_steps: int = Field(5, ge=0, description="stop with an error once more than this many "
                                               "consecutive steps were skipped")
    log_every: int = Field(100, ge=1, description="append a metrics.jsonl line (averages over the window) every N steps")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="each metrics.jsonl line also to "
                                     "TensorBoard (RUN/pretrain/tensorboard) and MLflow (training/tracking.py)")
    save_every: int = Field(10_000, ge=1, description="write a resumable checkpoint every N steps")
    keep_last: int = Field(3, ge=1, description="keep only the newest N checkpoints")
    keep_best_by: str | None = Field(None, description="also keep the checkpoint with the best value of this "
                                     "metrics.jsonl metric of the window logged at or before it (a loss = lowest, "
                                     "e.g. loss, mlm_loss; an accuracy = highest, e.g. mlm_acc); null = only the newest")
    allow_shard_change: bool = Field(False, description="resume although the train shards changed since the checkpoint "
                                     "(their manifest sha256 differs); off = the stage moves the old outputs aside "
                                     "(pretrain.replaced-<time>-<key>/) and starts over on the new shards")
    extend: bool = Field(False, description="a raised max_steps continues the newest checkpoint whatever the "
                         "schedule (`bertfactory ... --extend`): from the resumed step on the learning rate follows "
                         "the new budget's schedule. Without it a raised max_steps resumes only from a checkpoint "
                         "whose steps the new schedule leaves unchanged (constant; wsd before its decay; the warmup "
                         "of the others) and is refused otherwise (training/extend.py)")
    peak_flops: float | None = Field(None, gt=0.0, description="peak FLOP/s of ONE device (e.g. 989e12 for an H100 "
                                     "SXM in bf16): metrics.jsonl gets mfu = model FLOPs/token x tokens/s / (peak x "
                                     "processes); null = mfu null")
    verify_shards: bool = Field(True, description="check every shard's sha256 against the manifest before training")
    # not resume-neutral: compiled dropout draws its masks through inductor's own generator, so a compiled run
    # follows another sample path than an eager one (without dropout the two differ only in rounding)
    # not resume-neutral either: the packed path draws dropout masks over the real tokens only
    unpad: bool = Field(False, description="run the model on the real tokens only (training/models/core/varlen.py: "
                        "varlen attention on CUDA, exact SDPA on CPU; ModernBERT's local layers keep their window); "
                        "pays off when batches hold much padding. For the architectures that declare it: BERT "
                        "(RoBERTa, ALBERT) and ModernBERT; refused for the others when the recipe loads")
    # not resume-neutral: the projections run on other rows (rounding) and dropout masks are drawn over all slots
    unpad_layout: Literal["packed", "fixed"] = Field(
        "packed", description="unpad: how the tokens are laid out (training/models/core/varlen.py). packed = the "
        "real tokens alone: no FLOP on padding, but the token count and longest row are read on the host every "
        "forward and the shapes change with each batch. fixed = every slot of the [batch, length] grid, each row's "
        "padding a sequence of its own: attention is still the varlen kernel (ModernBERT's window in it, no mask), "
        "the projections also run on the padding, and in exchange nothing is read on the host and every shape "
        "depends on the batch shape alone, so the compiled step is one graph and can run as CUDA graphs "
        "(compile_mode reduce-overhead). For batches with little padding (packed rows, as ModernBERT's recipe "
        "has); needs unpad")
    length_buckets: list[int] | None = Field(
        None, description="pad every batch to the smallest of these lengths that holds its longest instance, and "
        "group instances of one bucket into the same batches (in windows of bucket_window batches; the order still "
        "depends only on seed and epoch): a handful of static shapes with little padding (TPU/XLA). null = pad to "
        "the longest instance of the batch (or to max_seq_len on XLA)")
    bucket_window: int = Field(64, ge=1, description="length_buckets: batches whose rows are sorted by bucket together")
    stream_batches: bool = Field(False, description="serve `clm` shards as batch_size parallel document streams (row r "
                                 "of step s+1 continues row r of step s; training/streams.py), so that a recurrent "
                                 "objective (txl_clm, plm with mem_len > 0) carries its memory across batches, as "
                                 "Transformer-XL and XLNet train")
    static_shapes: bool = Field(False, description="compute MLM logits at every prediction slot (batch x "
                                "max_predictions, padding slots ignored by the loss) instead of only the real ones: "
                                "the same loss with shapes that depend only on the batch size (XLA) and no host sync "
                                "(CUDA). For the architectures that declare it: BERT (RoBERTa, ALBERT) and ModernBERT; "
                                "refused for the others when the recipe loads")
    # not resume-neutral: another rounding of the loss and its gradients than the unfused head's
    fused_mlm_loss: bool = Field(False, description="compute the MLM decoder and its cross-entropy chunk by chunk in "
                                 "each training step, without the [masked tokens, vocab] logits and the passes over "
                                 "them (training/models/core/fused_loss.py): the same loss and gradients up to float "
                                 "rounding; on the CPU the decoder and loss take 0.6x the time (the demo's step ~0.8x). "
                                 "Evaluation keeps the logits. For BERT (RoBERTa, ALBERT) and ModernBERT; not with "
                                 "compile (inductor fuses the loss itself) or on XLA")
    compile: bool = Field(False, description="torch.compile the model (in place; checkpoints are unchanged)")
    # not resume-neutral: other kernels (CUDA graphs, autotuned ones), not checked to draw dropout masks alike
    compile_mode: Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs"] = Field(
        "default", description="compile: torch.compile's mode. default = inductor's kernels, launched one by one. "
        "reduce-overhead = the compiled forward and backward replayed as CUDA graphs, one launch each: pays at short "
        "steps (H200, BERT-base: 14.8 % -> 28.1 % MFU at 64 x 128 tokens a step, nothing at 256 x 128; "
        "benchmarks/RESULTS.md); needs static_shapes, not with unpad's packed layout or batch_size_ramp (a new shape "
        "every step would record a graph every step); the trainer copies what it keeps past a micro-step out of the "
        "graphs' memory (docs/gpu-step.md); on the CPU inductor skips CUDA graphs and it trains as default. "
        "max-autotune-no-cudagraphs = inductor autotunes its kernels (minutes per shape; not measured). Needs "
        "compile: true; a mode other than default is not implemented with stacking")
    init_from: str | None = Field(None, description="a model directory (e.g. an earlier run's pretrain/final) whose "
                                  "weights start training instead of a random init: continued pretraining on new "
                                  "data (flows/refresh.py). Same architecture and tokenizer required; the optimiser "
                                  "and schedule start fresh. Also a Hugging Face BERT directory or `sample:NAME` "
                                  "(e.g. sample:minilm): its encoder, the heads it lacks initialised fresh and logged; "
                                  "its vocabulary must be the shards' tokenizer's (training/hf/bert.py). null = random init")
    stacking: StackingConfig | None = Field(None, description="progressive stacking (training/stacking.py): double "
                                            "the layers after the listed steps; model.num_layers is the first depth. "
                                            "For the architectures that declare it: BERT (RoBERTa, ALBERT), SpanBERT "
                                            "and XLM; refused for the others when the recipe loads")
    tlm_shards: str | None = Field(None, description="objective xlm_mlm_tlm (XLM): the tlm-pairs shard directory "
                                   "(built with the run's tokenizer; relative to the run directory) whose batches "
                                   "alternate with the run's MLM batches (training/xlm_data.py)")

    @field_validator("objective")
    @classmethod
    def _known_objective(cls, value: str) -> str:
        # a field validator, so the error names pretrain.objective (and the closest objective)
        if value not in objective_names():
            # a member's name (objective: roberta) is told the objectives that train it, as their descriptions
            # name the member ("RoBERTa: masked LM only, ..."); else the closest objective's name
            plain = lambda text: text.lower().replace("-", "").replace("_", "")  # noqa: E731
            member = {name: objective_info(name).description.split(":", 1)[0] for name in objective_names()}
            trained = [name for name, who in member.items() if plain(who) == plain(value)]
            close = (f"{member[trained[0]]} is trained by objective {' or '.join(trained)}" if trained
                     else did_you_mean(value, objective_names()))
            raise ValueError(f"unknown objective {value!r}{f' ({close})' if close else ''}; valid choices: "
                             f"{', '.join(objective_names())}")
        return value

    @model_validator(mode="after")
    def _check(self) -> "PretrainConfig":
        if self.stream_batches:
            problem = stream_batches_problem(self)
            if problem:
                raise ValueError(problem)
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1) (got {self.betas})")
        if self.batch_size % self.grad_accumulation:
            raise ValueError(f"grad_accumulation ({self.grad_accumulation}) must divide batch_size ({self.batch_size}): "
                             "every micro-batch holds batch_size / grad_accumulation sequences")
        if self.keep_best_by is not None and not (self.keep_best_by == "loss" or
                                                  self.keep_best_by.endswith(("_loss", "_acc"))):
            raise ValueError(f"keep_best_by must name a loss (loss, mlm_loss, ...: lower is better) or an accuracy "
                             f"(mlm_acc, ...: higher is better) of metrics.jsonl, got {self.keep_best_by!r}")
        if self.batch_size_ramp is not None:
            if self.batch_size_ramp.start_batch_size > self.batch_size:
                raise ValueError(f"batch_size_ramp.start_batch_size ({self.batch_size_ramp.start_batch_size}) must be "
                                 f"<= batch_size ({self.batch_size})")
            if self.batch_size_ramp.steps > self.max_steps:
                raise ValueError(f"batch_size_ramp.steps ({self.batch_size_ramp.steps}) must be <= max_steps "
                                 f"({self.max_steps})")
            if self.device == "xla":
                raise ValueError("pretrain.batch_size_ramp changes the batch shape every step: not with device xla")
            if self.length_buckets:
                raise ValueError("pretrain.length_buckets and pretrain.batch_size_ramp cannot be combined (a ramped "
                                 "step reads a span of the epoch's stream that bucket windows would reorder); use one")
        if self.device == "xla" and not self.static_shapes:
            raise ValueError("pretrain.device xla needs pretrain.static_shapes: true (one graph shape per step; "
                             "otherwise XLA compiles again for every new number of masked tokens)")
        if self.device == "xla" and self.grad_accumulation > 1:
            raise ValueError("pretrain.device xla: grad_accumulation > 1 is not implemented (the micro-batch weights "
                             "are counted on the host); use grad_accumulation 1")
        if self.device == "xla" and (self.unpad or self.compile):
            raise ValueError("pretrain.device xla runs without pretrain.unpad and pretrain.compile (both produce "
                             "data-dependent shapes or a second compiler); set them to false")
        if self.fused_mlm_loss and (self.compile or self.device == "xla"):
            raise ValueError("pretrain.fused_mlm_loss is an eager step's kernel: not with pretrain.compile (inductor "
                             "fuses the loss itself) or device xla (its chunk loop would be traced into the graph); "
                             "set fused_mlm_loss: false")
        if self.xla_spmd and self.device != "xla":
            raise ValueError("pretrain.xla_spmd shards batches over XLA devices: it needs device xla")
        if self.parallelism == "fsdp":
            if self.device == "xla":
                raise ValueError("pretrain.parallelism fsdp runs on cpu or cuda (torch.distributed); on XLA use one "
                                 "process (pretrain.xla_spmd for several devices)")
            if self.optimizer == "adafactor":
                raise ValueError("pretrain.optimizer adafactor is not supported with parallelism fsdp: "
                                 "torch.optim.Adafactor fails on FSDP's sharded (DTensor) parameters (an in-place "
                                 "pow_ on a partial norm); use adamw or lamb, or parallelism ddp")
            if self.compile or self.stacking is not None:
                raise ValueError("pretrain.parallelism fsdp is not implemented with pretrain.compile or "
                                 "pretrain.stacking; turn them off or use parallelism ddp")
        if self.unpad_layout != "packed" and not self.unpad:
            raise ValueError(f"pretrain.unpad_layout {self.unpad_layout} is a layout of pretrain.unpad, which is off: "
                             f"set unpad: true, or leave unpad_layout packed")
        if self.compile_mode != "default":
            problem = self._compile_mode_problem()
            if problem:
                raise ValueError(problem)
        if self.freeze_encoder_steps >= self.max_steps:
            raise ValueError(f"pretrain.freeze_encoder_steps ({self.freeze_encoder_steps}) must be < max_steps "
                             f"({self.max_steps}): the encoder would never train")
        if self.freeze_encoder_steps and (self.parallelism == "fsdp" or self.stacking is not None):
            raise ValueError("pretrain.freeze_encoder_steps is not implemented with parallelism fsdp or "
                             "pretrain.stacking (both fix the trained parameters once); use parallelism ddp, no stacking")
        if self.stacking is not None and self.stacking.stages[-1] >= self.max_steps:
            raise ValueError(f"stacking.stages must lie before max_steps ({self.max_steps}), got {self.stacking.stages}")
        return self

    def _compile_mode_problem(self) -> str | None:
        """Why pretrain.compile_mode cannot run with the rest of this section, in one line; None = it can. CUDA
        graphs (reduce-overhead) replay one recorded shape with no host read inside: what gives every step its own
        shape or reads the device mid-step is refused rather than recording a graph per step."""
        mode = self.compile_mode
        if not self.compile:
            return (f"pretrain.compile_mode {mode} is a mode of pretrain.compile, which is off: set compile: true, or "
                    f"leave compile_mode default")
        if self.stacking is not None:
            return (f"pretrain.compile_mode {mode} is not implemented with pretrain.stacking (the stacked model is "
                    f"compiled anew in the default mode); use compile_mode default")
        if mode != "reduce-overhead":
            return None
        if self.unpad and self.unpad_layout == "packed":
            return ("pretrain.compile_mode reduce-overhead (CUDA graphs) runs without pretrain.unpad's packed "
                    "layout: packing reads the real tokens' count on the host every forward and gives each batch its "
                    "own shapes (a graph recorded per step); use unpad_layout fixed, or compile_mode default")
        if not self.static_shapes:
            return ("pretrain.compile_mode reduce-overhead (CUDA graphs) needs pretrain.static_shapes: true: without "
                    "it the masked-token gather reads a data-dependent count on the host every step and each count "
                    "records its own graph")
        if self.batch_size_ramp is not None:
            return ("pretrain.compile_mode reduce-overhead (CUDA graphs) runs without pretrain.batch_size_ramp: the "
                    "ramp changes the batch shape every step (a graph recorded per step); use compile_mode default "
                    "while ramping")
        return None

    # Fields that change how training is observed or stored, not the trajectory: a checkpoint written under
    # other values of these may still be resumed.
    RESUME_NEUTRAL: ClassVar[frozenset[str]] = frozenset({"log_every", "save_every", "keep_last", "num_threads", "verify_shards",
                                                          "keep_best_by", "allow_shard_change", "peak_flops", "tracking", "extend",
                                                          "loader_workers", "xla_cache_dir", "parallelism",
                                                          "fsdp", "xla_spmd"})

    def trajectory_fields(self) -> dict:
        fields = self.model_dump(mode="json", exclude=set(PretrainConfig.RESUME_NEUTRAL))
        if not self.freeze_encoder_steps:  # added later; 0 = the earlier behaviour, left out so that the stage
            del fields["freeze_encoder_steps"]  # keys and fingerprints of runs started before it stay valid
        if self.compile_mode == "default":  # added later too, left out alike
            del fields["compile_mode"]
        if self.unpad_layout == "packed":  # added later too, left out alike
            del fields["unpad_layout"]
        return fields
