"""The `bertfactory distill CONFIG --run-dir RUN` configuration (configs/distill-local.yaml is the example).

Paths (`teacher.checkpoint`, `shards`) are relative to the run directory; `teacher.hf` is an HF BERT directory or
`sample:NAME` (e.g. `sample:minilm`), imported with training.hf.import_from_hf into RUN/distill/teacher.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from bertfactory.config import StrictModel, did_you_mean
from evaluation.config import FinetuneConfig
from training.tracking import TrackingConfig


class TeacherConfig(StrictModel):
    checkpoint: str | None = Field("pretrain/final", description="our model directory (relative to the run directory)")
    hf: str | None = Field(None, description="an HF BERT directory or sample:NAME; when set it is the teacher and "
                           "`checkpoint` is ignored")

    @model_validator(mode="after")
    def _one_source(self) -> "TeacherConfig":
        if self.checkpoint is None and self.hf is None:
            raise ValueError("teacher needs `checkpoint` or `hf`")
        return self


class DistilBertConfig(StrictModel):
    enabled: bool = True
    teacher_layers: list[int] | None = Field(None, description="1-based teacher layers copied into the student; null = every other")
    general_steps: int = Field(200, ge=0, description="general distillation steps on RUN/shards (0 = none)")
    batch_size: int = Field(32, ge=1)
    learning_rate: float = Field(5e-4, gt=0)
    temperature: float = Field(2.0, gt=0)
    alpha_ce: float = Field(5.0, ge=0, description="soft cross-entropy on MLM logits (needs a teacher MLM head)")
    alpha_mlm: float = Field(2.0, ge=0)
    alpha_cos: float = Field(1.0, ge=0)


class PkdConfig(StrictModel):
    enabled: bool = True
    student_layers: int = Field(1, ge=1, description="the student = the teacher's first k layers")
    strategy: Literal["skip", "last"] = "skip"
    alphas: list[float] = Field([0.5], description="grid: weight of the soft loss")
    temperatures: list[float] = Field([10.0], description="grid")
    beta: float = Field(100.0, ge=0, description="patient-loss weight")
    epochs: int = Field(3, ge=1)
    learning_rate: float = Field(5e-4, gt=0)


class AugmentConfig(StrictModel):
    enabled: bool = True
    p: float = Field(0.4, ge=0, le=1)
    n_candidates: int = Field(15, ge=1)
    copies: int = Field(20, ge=1)
    max_examples: int | None = Field(None, ge=1, description="augment only the first N training examples (cost)")


class TinyBertConfig(StrictModel):
    enabled: bool = True
    hidden_size: int = Field(64, ge=1)
    num_layers: int = Field(1, ge=1)
    intermediate_size: int = Field(256, ge=1)
    num_heads: int | None = Field(None, description="null = the teacher's (attention distillation needs it)")
    student: Literal["teacher", "bert"] = Field("teacher", description="the student's member: the teacher's (a "
                                                "ModernBERT teacher gives a ModernBERT student) or BERT")
    init: Literal["random", "teacher"] = Field(
        "random", description="the student's initial weights: random (seeded), or teacher = weight selection "
        "(distillation/weight_selection.py): student layer m starts from teacher layer g(m) of the layer map, every "
        "weight the teacher's restricted to fixed subsets of its hidden, head and FFN dimensions (a BERT teacher and "
        "student with the teacher's heads)")
    mapping: Literal["uniform", "top", "bottom"] = "uniform"
    layer_map: dict[int, int] | None = Field(None, description="explicit g(m) (student layer -> teacher layer, 0 = embeddings)")
    attention: bool = Field(True, description="distil pre-softmax attention scores too")
    general_steps: int = Field(200, ge=0, description="general distillation steps on RUN/shards (0 = none)")
    general_batch_size: int = Field(32, ge=1)
    intermediate_epochs: int = Field(3, ge=0)
    prediction_epochs: int = Field(3, ge=1)
    temperature: float = Field(1.0, gt=0)
    learning_rate: float = Field(1e-3, gt=0)
    augment: AugmentConfig = AugmentConfig()
    ablations: bool = Field(True, description="also score TinyBERT without general distillation (when general_steps > 0) "
                            "and without augmentation (when enabled); no task distillation is student_direct")


class DistillConfig(StrictModel):
    teacher: TeacherConfig = TeacherConfig()
    shards: str = Field("shards", description="pretraining shards for general distillation (relative to the run directory)")
    task: str = Field("movie_sentiment", description="a built-in task (evaluation.tasks.registry)")
    device: str = "cpu"
    num_threads: int | None = Field(None, ge=1, description="torch CPU threads for the run (null = torch's default; "
                                    "1 on a shared machine)")
    seed: int = 12345
    finetune: FinetuneConfig = FinetuneConfig(num_seeds=1)
    speed_repeats: int = Field(3, ge=1, description="timed passes over the test inputs per model (median reported)")
    distilbert: DistilBertConfig = DistilBertConfig()
    pkd: PkdConfig = PkdConfig()
    tinybert: TinyBertConfig = TinyBertConfig()
    general_cache: str | None = Field(
        "cache/distill-general", description="where generally-distilled students are kept "
        "(distillation/general_cache.py): a directory relative to the run directory (for a run on object storage, "
        "the same path in its bucket), an absolute path, or an s3:// / gs:// URL shared by several machines. "
        "General distillation does not read the task, so another task, or another seed with `general_seed` pinned, "
        "reuses the student distilled from the same teacher, shards, initial weights, settings, seed and thread "
        "count. Outside RUN/distill, which a changed distill config replaces; null = no cache")
    teacher_cache: str | None = Field(
        "cache/distill-teacher", description="where teachers fine-tuned on the task are kept (distillation/"
        "state_cache.py), as `general_cache`: the runs that share the teacher, the task's encoded inputs, the "
        "fine-tuning settings, the seed and the thread count (a study's students, general distillation on or off, "
        "its ablations) fine-tune it once; null = no cache")
    general_seed: int | None = Field(
        None, description="the seed of general distillation (shard order, dropout, TinyBERT's initial student and "
        "projections); null = `seed`. Pin it to start every seed of a study from one general student (TinyBERT's "
        "paper task-distils one general TinyBERT), so the seeds vary the task phases only")
    general_only: bool = Field(False, description="run general distillation of the enabled students into "
                               "`general_cache` and stop (no task, no scores): prepares a study's general students, "
                               "e.g. one process per student on a multi-core machine")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="every distillation phase's metrics "
                                     "also to TensorBoard (RUN/distill/tensorboard/NN-<phase>) and MLflow")

    @field_validator("task")
    @classmethod
    def _builtin_task(cls, value: str) -> str:
        # checked when the config loads (it was refused after the teacher was loaded, the general students distilled)
        from evaluation.tasks.registry import BUILTIN_TASKS

        if value not in BUILTIN_TASKS:
            close = did_you_mean(value, BUILTIN_TASKS)
            raise ValueError(f"{value!r} is not a built-in task ({close + ' ' if close else ''}built-in: "
                             f"{', '.join(BUILTIN_TASKS)}); distillation scores a built-in classification task")
        return value

    @model_validator(mode="after")
    def _general_only_needs_the_cache(self) -> "DistillConfig":
        if self.general_only and self.general_cache is None:
            raise ValueError("general_only writes the general students into general_cache, which is null")
        return self

    @property
    def general_seed_or_seed(self) -> int:
        return self.seed if self.general_seed is None else self.general_seed
