"""Config section `evaluate` (EvaluateConfig): which checkpoint to evaluate, the intrinsic evaluation on the
held-out shards, the fine-tuning settings shared by every downstream task (with per-task overrides), the tasks
(built-in ones by name, user task files) and the feature-based comparison.

Defaults are paper scale:
- Devlin et al. 2019 (BERT) GLUE fine-tuning: batch 32, 3 epochs, AdamW (weight decay 0.01), linear warmup over 10 %
  of the steps then linear decay, dropout 0.1 on the pooled [CLS], sequences up to 128 tokens; the learning rate
  picked on dev from the grid {5e-5, 4e-5, 3e-5, 2e-5} (`learning_rates`), and for small tasks several random
  restarts — here `num_seeds: 5` fine-tuning runs per learning rate, reported as mean ± std.
- SQuAD (BERT's run_squad): 384-token windows, doc stride 128, questions up to 64 tokens, 20-best spans of at most
  30 tokens.
- Off unless asked for: layer-wise learning-rate decay (`layerwise_lr_decay` < 1: ELECTRA uses 0.8, ULMFiT's
  discriminative fine-tuning 1/2.6), ULMFiT's gradual unfreezing and slanted triangular schedule (cut fraction =
  `warmup_ratio`, ratio 32), ModernBERT's warmup-stable-decay schedule (`schedule: wsd`, `wsd_decay_fraction`),
  early stopping (`early_stopping_patience`).
configs/local.yaml overrides these for a tiny model on a 2-core CPU (few examples, 1 seed, one learning rate).

`tasks` maps a task name to its settings; a list of names is accepted too:

    tasks: [movie_sentiment, trec_coarse]                    # built-in tasks, their cached samples
    tasks:
      movie_valence: {finetune: {epochs: 5}}                  # per-task fine-tuning overrides
      my_task: {input: data/my.tsv, task_type: classification, text_column: sentence, label_column: label}

Any other name (a task that is neither built in nor has `input` and `task_type`) is refused when the config is
validated, before any stage runs, naming the built-in tasks and the closest of them (`unknown_task_message`).

Zero-shot cross-lingual transfer (`crosslingual`, XNLI-style): the models fine-tuned on a task (its train/dev) are
scored unchanged on another language's labelled file with the same task type and label set; other checkpoints
(`compare_checkpoints`, e.g. one imported with `bertfactory import-hf`) are fine-tuned with the same settings on the
same splits and reported beside ours:

    crosslingual:
      - {task: movie_sentiment, input: data/de.tsv, language: de, text_column: satz, label_column: label}
    compare_checkpoints: [/models/minilm]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from bertfactory.config import StrictModel
from bertfactory.names import name_problem
from training.tracking import TrackingConfig

from .tasks.base import TASK_TYPES

# The five built-in tasks of the contract (engineer R's registry provides their readers).
DEFAULT_TASKS = ("movie_sentiment", "movie_valence", "uci_sentences", "trec_coarse", "wnut16")


class IntrinsicConfig(StrictModel):
    """Masked-LM and next-sentence accuracy of the pretrained model on the held-out shards."""

    enabled: bool = Field(True, description="run the intrinsic evaluation")
    split: str = Field("heldout", description="shard split to evaluate on (never the training split in a report)")
    mask_variant: int = Field(0, ge=0, description="which of the shards' precomputed mask variants to score")
    batch_size: int = Field(64, ge=1, description="instances per forward pass")
    max_batches: int | None = Field(None, ge=1, description="stop after this many batches (null = the whole split)")
    pseudo_perplexity_instances: int = Field(0, ge=0, description="score the pseudo-perplexity (every token masked "
                                             "in turn; one forward pass per token) on the first N instances of the "
                                             "split (0 = off)")


class ObjectiveEvalConfig(StrictModel):
    """The checkpoint's own pretraining objective scored on held-out shards against its no-context baseline
    (evaluation/heldout.py): every member's held-out metric (MLM / SBO / RTD / PLM / CLM)."""

    enabled: bool = Field(True, description="run it (checkpoints that record their objective: our pretraining's)")
    split: str = Field("heldout", description="shard split to score (never the training split in a report)")
    batch_size: int = Field(32, ge=1, description="instances per batch")
    max_batches: int | None = Field(16, ge=1, description="stop after this many batches (null = the whole split)")
    seed: int = Field(0, ge=0, description="order of the split's rows and the objective's own random draws")
    max_seq_len: int | None = Field(None, ge=3, description="score at rows of up to this many tokens: the split's "
                                    "rows joined into longer ones (evaluation/long_rows.py; running-text shards: "
                                    "full-sentences, doc-sentences, single-segment), for a long-context score "
                                    "such as ModernBERT's at 1,024 tokens; at most model.max_position_embeddings. "
                                    "null = the shards' rows as they are (preprocess.instances.max_seq_len)")


class FinetuneConfig(StrictModel):
    """The fine-tuning settings used for every task and for every model compared (pretrained and random init)."""

    epochs: int = Field(3, ge=1, description="maximum passes over the task's training split; the epoch with the best dev score is kept")
    learning_rate: float = Field(2e-5, gt=0.0, description="peak AdamW learning rate when `learning_rates` is null")
    learning_rates: list[float] | None = Field(None, description="learning-rate grid; the rate with the best mean dev score over seeds is reported (BERT: [5e-5, 4e-5, 3e-5, 2e-5]; null = [learning_rate])")
    size_scaled_grid: bool = Field(False, description="when `learning_rates` is null: try three rates scaled to the encoder's hidden size (evaluation/lr_grid.py, docs/tasks.md) instead of `learning_rate` alone; `bertfactory evaluate --task-file` turns it on unless a learning rate is given")
    num_seeds: int = Field(5, ge=1, description="fine-tuning runs per learning rate with seeds seed, seed+1, ...; metrics are their mean and std")
    batch_size: int = Field(32, ge=1, description="examples per optimiser step")
    max_seq_len: int = Field(128, ge=3, description="tokens per model input including [CLS]/[SEP]; longer inputs are truncated (SQuAD: windowed)")
    warmup_ratio: float = Field(0.1, ge=0.0, le=1.0, description="fraction of all steps spent warming the lr up linearly (slanted triangular: the cut fraction)")
    schedule: Literal["linear", "slanted_triangular", "wsd"] = Field("linear", description="linear warmup + linear decay (BERT), ULMFiT's slanted triangular lr, or warmup-stable-decay (ModernBERT: warmup, the peak, then a 1-sqrt decay to 0 over the last wsd_decay_fraction of the steps; training/optim.py's)")
    stlr_ratio: float = Field(32.0, ge=1.0, description="slanted triangular: how much smaller the lowest lr is than the peak")
    wsd_decay_fraction: float = Field(0.1, gt=0.0, le=1.0, description="wsd: the share of all steps (rounded to whole steps) over which the lr decays to 0; a decay longer than the steps after warmup starts right after it")
    layerwise_lr_decay: float = Field(1.0, gt=0.0, le=1.0, description="lr of layer l = lr * decay^(depth above l); 1 = the same lr everywhere")
    gradual_unfreezing: bool = Field(False, description="ULMFiT: epoch 1 trains the head only, each later epoch unfreezes the next layer down")
    early_stopping_patience: int | None = Field(None, ge=1, description="stop after this many epochs without a better dev score (null = run every epoch)")
    weight_decay: float = Field(0.01, ge=0.0, description="AdamW decoupled weight decay (not on biases and LayerNorm weights)")
    classifier_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on the vector(s) a head reads")
    max_grad_norm: float = Field(1.0, gt=0.0, description="clip the global gradient norm to this value")
    unpad: bool = Field(False, description="run the encoder on the real tokens only (training/models/core/varlen.py): no FLOP on padding outside attention, the same outputs up to float rounding (dropout draws other masks), the same batches; for encoders with an unpadded path (BERT, ModernBERT and the members built on them)")
    eval_batch_size: int = Field(128, ge=1, description="model inputs per forward pass when scoring dev/test")
    max_train_examples: int | None = Field(None, ge=1, description="use N training examples, a seeded random subset in split order (null = all)")
    max_eval_examples: int | None = Field(None, ge=1, description="score N dev and N test examples, a seeded random subset (null = all)")
    seed: int = Field(12345, description="first seed: head init, a random-init encoder, dropout and data order")
    doc_stride: int = Field(128, ge=1, description="SQuAD: tokens between the starts of consecutive context windows")
    max_query_len: int = Field(64, ge=1, description="SQuAD: question tokens kept")
    max_answer_len: int = Field(30, ge=1, description="SQuAD: longest answer span in tokens")
    n_best: int = Field(20, ge=1, description="SQuAD: start and end candidates per window in span decoding")

    def grid(self) -> list[float]:
        return list(self.learning_rates) if self.learning_rates else [self.learning_rate]

    def for_encoder(self, hidden_size: int | None) -> "FinetuneConfig":
        """These settings for an encoder `hidden_size` wide: with `size_scaled_grid` (and no `learning_rates`), the
        grid made explicit; otherwise unchanged."""
        if not self.size_scaled_grid or self.learning_rates or hidden_size is None:
            return self
        from .lr_grid import size_scaled_grid

        return self.model_copy(update={"learning_rates": size_scaled_grid(hidden_size)})

    def seeds(self) -> list[int]:
        return [self.seed + k for k in range(self.num_seeds)]

    @field_validator("learning_rates")
    @classmethod
    def _positive_rates(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (not value or any(v <= 0 for v in value)):
            raise ValueError("learning_rates must be a non-empty list of positive numbers (or null)")
        return value


class TaskConfig(StrictModel):
    """One downstream task: a built-in task by its name (input optional), or a user task file."""

    enabled: bool = Field(True, description="run this task")
    input: str | None = Field(None, description="data file; built-in tasks: null = the cached sample; `sample:NAME[/FILE]` for a sample")
    task_type: str | None = Field(None, description=f"user tasks: one of {', '.join(TASK_TYPES)}")
    text_column: str | None = Field(None, description="user TSV/CSV/JSONL: the text column")
    text_b_column: str | None = Field(None, description="user pair tasks: the second text column")
    label_column: str | None = Field(None, description="user tasks: the label / target column")
    label_names: list[str] | None = Field(None, description="user classification tasks: the label set in id order")
    language: str = Field("en", description="ISO 639 code of the text")
    dev_input: str | None = Field(None, description="user tasks: a separate dev file")
    test_input: str | None = Field(None, description="user tasks: a separate test file")
    primary_metric: str | None = Field(None, description="override the task type's primary metric (e.g. mcc for CoLA)")
    finetune: dict[str, Any] = Field(default_factory=dict, description="overrides of `evaluate.finetune` for this task (epochs, learning_rates, ...)")

    @field_validator("task_type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None and value not in TASK_TYPES:
            raise ValueError(f"task_type {value!r} is not one of {', '.join(TASK_TYPES)}")
        return value

    @field_validator("finetune")
    @classmethod
    def _known_overrides(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(FinetuneConfig.model_fields))
        if unknown:
            raise ValueError(f"unknown finetune key(s) {', '.join(unknown)}; valid: {', '.join(FinetuneConfig.model_fields)}")
        try:
            FinetuneConfig.model_validate(value)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            raise ValueError(problems) from None
        return value

    @model_validator(mode="after")
    def _columns_read(self) -> "TaskConfig":
        """A column setting the task type does not read is refused when the recipe is validated, before any stage."""
        from .tasks.files import unread_columns

        if self.task_type is not None and \
                (problem := unread_columns(self.task_type, self.text_column, self.text_b_column, self.label_column,
                                           self.label_names)):
            raise ValueError(problem)
        return self

    def finetune_config(self, base: FinetuneConfig) -> FinetuneConfig:
        """The shared fine-tuning settings with this task's overrides applied."""
        return FinetuneConfig.model_validate({**base.model_dump(), **self.finetune})


class FeatureBasedConfig(StrictModel):
    """The BERT paper's feature-based NER table: frozen encoder, layer combinations feeding a small BiLSTM tagger."""

    enabled: bool = Field(False, description="run the feature-based comparison")
    task: str = Field("wnut16", description="a tagging task among `tasks` (by name)")
    options: list[str] = Field(default_factory=lambda: ["embeddings", "last", "second_to_last", "sum_last_four",
                                                        "concat_last_four", "scalar_mix"],
                               description="layer combinations to compare (see evaluation.features.OPTIONS)")
    lstm_hidden: int = Field(128, ge=1, description="BiLSTM hidden units per direction (the paper: 768, two layers)")
    epochs: int = Field(5, ge=1, description="tagger training epochs; the best dev epoch is scored on test")
    learning_rate: float = Field(1e-3, gt=0.0, description="Adam lr of the tagger and the scalar mix")
    batch_size: int = Field(32, ge=1, description="sentences per step")


class CrosslingualTarget(StrictModel):
    """Zero-shot transfer: another language's labelled data of an evaluated task, scored and never trained on."""

    task: str = Field(description="the source task among `tasks` (its train/dev are what the models are fine-tuned on)")
    input: str = Field(description="the target file (TSV/CSV/JSONL, CoNLL, SQuAD JSON) in the source task's type and "
                                   "label set; every example of it is scored; `sample:NAME[/FILE]` for a sample")
    language: str = Field(description="ISO 639 code of the target text")
    name: str | None = Field(None, description="key of this target in results.json (default: the language code)")
    text_column: str | None = Field(None, description="TSV/CSV/JSONL: the text column (default `text`)")
    text_b_column: str | None = Field(None, description="pair tasks: the second text column (default `text_b`)")
    label_column: str | None = Field(None, description="the label / target column (default `label`)")

    @field_validator("language")
    @classmethod
    def _code(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("language must be a language code such as 'de'")
        return value

    @property
    def key(self) -> str:
        return self.name or self.language


class EvaluateConfig(StrictModel):
    """What to evaluate and how."""

    checkpoint: str = Field("pretrain/final", description="model directory to evaluate; relative paths are inside the run directory")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available, else cpu")
    num_threads: int | None = Field(None, ge=1, description="CPU threads for torch (null = torch's default)")
    workers: int = Field(1, ge=1, description="fine-tuning runs (learning rate x seed) at once, each in its own "
                         "process (evaluation/run_pool.py; CPU only). N workers at 1 thread give exactly the scores "
                         "of 1 worker at 1 thread, usually sooner than 1 worker at N threads")
    worker_threads: int | None = Field(None, ge=1, description="with workers > 1: each worker's torch threads (null "
                                       "= num_threads, or the cores shared equally when that is null too)")
    random_init_baseline: bool = Field(True, description="also fine-tune the same architecture from random weights with the same budget")
    baselines: list[Literal["tfidf_logreg", "majority"]] = Field(default_factory=lambda: ["tfidf_logreg", "majority"], description="non-neural baselines (tfidf_logreg is skipped for tagging and SQuAD)")
    cache_encodings: bool = Field(True, description="keep each task's encoded inputs in RUN/eval/cache (refused for a checkpoint with another tokenizer)")
    save_best: bool = Field(False, description="write each task's best fine-tuned pretrained model to RUN/eval/finetuned/<task>")
    intrinsic: IntrinsicConfig = Field(default_factory=IntrinsicConfig, description="held-out masked-LM / NSP accuracy")
    objective: ObjectiveEvalConfig = Field(default_factory=ObjectiveEvalConfig,
                                           description="held-out score of the checkpoint's pretraining objective")
    finetune: FinetuneConfig = Field(default_factory=FinetuneConfig, description="fine-tuning settings for every task")
    tasks: dict[str, TaskConfig] = Field(default_factory=lambda: {n: TaskConfig() for n in DEFAULT_TASKS},
                                         description="downstream tasks by name (built-in) or with an input file")
    feature_based: FeatureBasedConfig = Field(default_factory=FeatureBasedConfig, description="feature-based (frozen encoder) comparison")
    crosslingual: list[CrosslingualTarget] = Field(default_factory=list, description="zero-shot transfer targets: "
                                                   "another language's file of an evaluated task")
    compare_checkpoints: list[str] = Field(default_factory=list, description="other model directories (e.g. from "
                                           "`bertfactory import-hf`) fine-tuned with the same settings on every task; "
                                           "relative paths are inside the run directory")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="fine-tuning curves (per epoch: "
                                     "train loss, dev score, lr) also to TensorBoard (RUN/eval/tensorboard) / MLflow")

    @field_validator("tasks", mode="before")
    @classmethod
    def _list_of_names(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if not all(isinstance(v, str) for v in value):
                raise ValueError("a task list holds task names; give settings as a mapping name -> settings")
            return {name: {} for name in value}
        if isinstance(value, dict):
            return {k: ({} if v is None else v) for k, v in value.items()}
        return value

    @field_validator("tasks")
    @classmethod
    def _names_are_file_names(cls, value: dict[str, TaskConfig]) -> dict[str, TaskConfig]:
        for name in value:  # each becomes RUN/cache/tasks/<name>, RUN/eval/finetuned/<name>, confusion_<name>.png
            problem = name_problem(name)
            if problem is not None:
                raise ValueError(f"task name {name!r} becomes a file name and {problem}")
        return value

    @field_validator("tasks")
    @classmethod
    def _tasks_are_declared(cls, value: dict[str, TaskConfig]) -> dict[str, TaskConfig]:
        # checked with the recipe, before any stage runs: a misspelt name would otherwise surface only when the
        # evaluate stage loads its data, after preprocessing and pretraining (evaluation/run.py:load_task)
        problems = [p for name, task in value.items() if (p := task_problem(name, task)) is not None]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _feature_task_listed(self) -> "EvaluateConfig":
        if self.feature_based.enabled and self.feature_based.task not in self.tasks:
            raise ValueError(f"feature_based.task {self.feature_based.task!r} is not among evaluate.tasks "
                             f"({', '.join(self.tasks) or 'none'}): add it to evaluate.tasks, set "
                             "evaluate.feature_based.task to one of them, or switch the comparison off (--set "
                             "evaluate.feature_based.enabled=false)")
        return self

    @model_validator(mode="after")
    def _workers_on_the_cpu(self) -> "EvaluateConfig":
        if self.workers > 1 and self.device == "cuda":
            raise ValueError(f"workers={self.workers} runs fine-tunings in CPU processes; with device 'cuda' set "
                             "workers to 1")
        return self

    @model_validator(mode="after")
    def _crosslingual_sources_listed(self) -> "EvaluateConfig":
        seen: set[tuple[str, str]] = set()
        for i, target in enumerate(self.crosslingual):
            if target.task not in self.enabled_tasks():
                raise ValueError(f"crosslingual[{i}].task {target.task!r} is not an enabled task of evaluate.tasks "
                                 f"({', '.join(self.enabled_tasks()) or 'none'})")
            if (target.task, target.key) in seen:
                raise ValueError(f"crosslingual[{i}]: task {target.task!r} already has a target named "
                                 f"{target.key!r}; give one of them a `name`")
            seen.add((target.task, target.key))
        return self

    def checkpoint_path(self, run_dir: Path) -> Path:
        """The model directory to evaluate: `checkpoint`, relative paths taken inside `run_dir`."""
        return _inside(self.checkpoint, run_dir)

    def compared_paths(self, run_dir: Path) -> list[Path]:
        """`compare_checkpoints` as paths, relative ones taken inside `run_dir` (as `checkpoint`)."""
        return [_inside(p, run_dir) for p in self.compare_checkpoints]

    def enabled_tasks(self) -> dict[str, TaskConfig]:
        return {name: t for name, t in self.tasks.items() if t.enabled}


def unknown_task_message(name: str) -> str:
    """The one line refusing a task `name` that is neither built in nor declared from a file: the built-in names,
    the closest of them when one is close, and how to declare a task from a file."""
    from bertfactory.config import did_you_mean

    from .tasks.registry import BUILTIN_TASKS

    hint = (did_you_mean(name, BUILTIN_TASKS) + " ").lstrip()
    return (f"evaluate.tasks.{name}: {name!r} is not a built-in task ({hint}built-in: {', '.join(BUILTIN_TASKS)}); "
            f"a task from a file needs `input` and `task_type` (e.g. {name}: {{input: data/{name}.tsv, task_type: "
            "classification}, docs/tasks.md)")


_FILE_LAYOUT = ("text_column", "text_b_column", "label_column", "label_names", "dev_input", "test_input")


def task_problem(name: str, task: TaskConfig) -> str | None:
    """Why `evaluate.tasks.<name>` cannot be loaded as declared (None: it can): a name without `task_type` must be a
    built-in task (its cached sample, or `input`); a task with `task_type` reads its own `input` file."""
    if task.task_type is None:
        from .tasks.registry import BUILTIN_TASKS

        if name not in BUILTIN_TASKS:
            return unknown_task_message(name)
        # a built-in task's reader knows its layout and splits: these were left out without a word
        layout = [key for key in _FILE_LAYOUT if getattr(task, key) is not None]
        if layout:
            return (f"evaluate.tasks.{name}: {', '.join(layout)} describe{'s' if len(layout) == 1 else ''} a task file, "
                    f"and the built-in task {name!r} reads its own layout and splits (its `input` may be your copy of "
                    "its data); a file of your own is a task with `task_type` and `input`, under a name of its own")
        return None
    if not task.input:
        return f"evaluate.tasks.{name}: a task with task_type {task.task_type!r} needs `input` (the data file)"
    return None


def _inside(path: str, run_dir: Path) -> Path:
    resolved = Path(path).expanduser()
    return resolved if resolved.is_absolute() else Path(run_dir) / resolved
