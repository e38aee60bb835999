"""The results.json contract (schema v5, documented in docs/results.md): pydantic models, the writer (validates,
then writes atomically) and the reader (checks format and schema version first, then validates every field).

    from evaluation.results import read_results
    results = read_results(run_dir / "eval" / "results.json")     # a plain dict, validated
    results["tasks"]["movie_sentiment"]["pretrained"]["accuracy"]       # mean over seeds; accuracy_std beside it
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from bertfactory.errors import ContractError
from bertfactory.io import atomic_write_json, read_json_file

from .scoring import METRICS as TYPE_METRICS
from .tasks.base import TASK_TYPES

FORMAT = "bertfactory.results"
SCHEMA_VERSION = 5
# v3 only adds optional parts to v2, v4 to v3 (tasks.<task>.settings: results of separate evaluations, merged, each
# say their own settings) and v5 to v4 (intrinsic.nsp_label_counts), so v2, v3 and v4 files are read as they are.
# v1 (one task, one seed, accuracy only) is not: re-run `bertfactory evaluate`.
SUPPORTED_SCHEMA_VERSIONS = (2, 3, 4, 5)
RESULTS_FILE = "results.json"

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]  # a rate in [0, 1]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckpointInfo(_Strict):
    path: str = Field(description="the evaluated model directory, relative to the run directory when inside it")
    model_sha256: str = Field(description="sha256 of its model.safetensors")
    tokenizer_sha256: str = Field(description="sha256 of its tokenizer.json")
    num_parameters: int = Field(ge=0, description="parameters of BertForPreTraining (encoder + MLM/NSP heads)")
    model: dict[str, Any] = Field(description="the architecture (config.json's `model`)")


class IntrinsicResults(_Strict):
    split: str
    mask_variant: int = Field(ge=0)
    instances: int = Field(ge=1)
    masked_tokens: int = Field(ge=1)
    mlm_accuracy: Fraction
    mlm_loss: float = Field(ge=0.0)
    mlm_perplexity: float = Field(ge=1.0)
    nsp_accuracy: Fraction | None = None  # None: the model has no sentence-pair head (objective without NSP/SOP)
    nsp_loss: float | None = Field(None, ge=0.0)
    nsp_label_counts: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=2, max_length=2, description="v5: instances per NSP label, [IsNext, NotNext] (sentence-order "
        "shards: [in order, swapped]); one of them 0: the NSP accuracy is over one label only")
    chance_mlm_accuracy: Fraction
    unigram_mlm_accuracy: Fraction
    unigram_mlm_loss: float = Field(ge=0.0)
    pseudo_perplexity: float | None = Field(None, ge=1.0)  # present when intrinsic.pseudo_perplexity_instances > 0
    pseudo_perplexity_tokens: int | None = Field(None, ge=1)
    pseudo_perplexity_instances: int | None = Field(None, ge=1)


class TaskDataInfo(_Strict):
    source_path: str
    source_sha256: str
    lines: int = Field(ge=0)
    split_method: str
    sizes: dict[Literal["train", "dev", "test"], int]
    label_names: list[str]
    label_counts: dict[Literal["train", "dev", "test"], dict[str, int]] | None = Field(
        None, description="classification: examples per label name; tagging: words per tag")
    dropped: dict[str, int] = Field(description="examples not used, by reason (e.g. zero_valence)")
    suspicious_labels: dict[str, int] | None = Field(
        None, description="user task files whose label set was inferred: labels with fewer than 5 % of the most "
                          "frequent label's training examples (typos?), label -> examples")
    truncated: dict[Literal["train", "dev", "test"], int] = Field(
        default_factory=dict, description="inputs cut by max_seq_len (tagging: words left without a prediction)")


# Every metric any task type reports, with its range (SQuAD's are percentages, as the official scripts).
METRIC_RANGES: dict[str, tuple[float | None, float | None]] = {
    "accuracy": (0.0, 1.0), "f1": (0.0, 100.0), "macro_f1": (0.0, 1.0), "mcc": (-1.0, 1.0),
    "pearson": (-1.0, 1.0), "spearman": (-1.0, 1.0), "mse": (0.0, None),
    "entity_f1": (0.0, 1.0), "entity_precision": (0.0, 1.0), "entity_recall": (0.0, 1.0),
    "exact_match": (0.0, 100.0), "exact": (0.0, 100.0), "best_f1": (0.0, 100.0), "best_exact": (0.0, 100.0),
    "HasAns_exact": (0.0, 100.0), "HasAns_f1": (0.0, 100.0), "NoAns_exact": (0.0, 100.0), "NoAns_f1": (0.0, 100.0),
    "na_threshold": (0.0, 1.0),
}
# `f1` is a rate for classification and a percentage for SQuAD; the task-level check below narrows it.


def _metric_fields() -> dict:
    fields = {}
    for name, (low, high) in METRIC_RANGES.items():
        fields[name] = (float | None, Field(None, ge=low, le=high, allow_inf_nan=False))
        fields[f"{name}_std"] = (float | None, Field(None, ge=0.0, allow_inf_nan=False))
    return fields


MetricValues = create_model("MetricValues", __base__=_Strict, **_metric_fields())
MetricValues.__doc__ = "Metric means under their own names and `<metric>_std` (absent when not defined)."


def metric_names(values: BaseModel) -> set[str]:
    return {k.removesuffix("_std") for k, v in values if v is not None and k.removesuffix("_std") in METRIC_RANGES}


class EpochRecord(_Strict):
    epoch: int = Field(ge=1)
    train_loss: float = Field(ge=0.0)
    dev_score: float | None = Field(None, description="the primary metric on dev (absent when undefined)")
    lr_end: float = Field(ge=0.0)
    trained_depths: int | None = Field(None, ge=1, description="gradual unfreezing: depths trained this epoch")


class RunRecord(_Strict):
    """One fine-tuning run (the chosen learning rate, one seed)."""

    seed: int
    best_epoch: int = Field(ge=1)
    steps: int = Field(ge=1)
    stopped_early: bool
    dev: MetricValues
    test: MetricValues
    accuracy_ci95: tuple[Fraction, Fraction] | None = Field(None, description="Wilson 95 % interval of this run's test accuracy")
    epochs: list[EpochRecord]


class GridPoint(_Strict):
    learning_rate: float = Field(gt=0.0)
    dev_mean: float | None = None
    dev_std: float = Field(ge=0.0)


class FinetuneScores(MetricValues):
    """Test metrics: mean over seeds of the chosen learning rate, and `<metric>_std`."""

    dev: MetricValues = Field(description="dev metrics of the restored epochs, mean and std over seeds")
    learning_rate: float = Field(gt=0.0, description="the grid point with the best mean dev primary metric")
    lr_grid: list[GridPoint]
    seeds: list[int]
    runs: list[RunRecord]
    confusion_matrix: list[list[int]] | None = Field(None, description="classification: test gold x predicted, summed over seeds")


class BaselineScores(MetricValues):
    """A non-neural baseline's test metrics (deterministic: std is 0, written for symmetry)."""

    dev: MetricValues
    details: dict[str, Any] = Field(default_factory=dict, description="what was predicted / fitted")


class ComparedScores(FinetuneScores):
    """Another checkpoint (`evaluate.compare_checkpoints`) fine-tuned with the same settings on the same splits."""

    truncated: dict[Literal["train", "dev", "test"], int] = Field(
        default_factory=dict, description="inputs cut by max_seq_len with this checkpoint's tokenizer")


def check_metrics(task_type: str, where: str, values: BaseModel) -> None:
    """Refuse metrics that do not belong to `task_type` (and a classification f1 above 1)."""
    extra = metric_names(values) - set(TYPE_METRICS[task_type])
    if extra:
        raise ValueError(f"{where}: {', '.join(sorted(extra))} not metrics of {task_type}")
    if task_type != "squad" and getattr(values, "f1", None) is not None and values.f1 > 1.0:
        raise ValueError(f"{where}.f1: {values.f1} is above 1")


class Comparison(_Strict):
    """Pretrained vs random init on the same test examples."""

    primary_metric: str
    difference: float | None = Field(None, description="pretrained minus random_init, mean primary test metric")
    seed: int | None = Field(None, description="classification: the seed whose runs McNemar's test compares")
    pretrained_only_correct: int | None = Field(None, ge=0, description="test examples only the pretrained run gets right")
    random_init_only_correct: int | None = Field(None, ge=0, description="test examples only the random-init run gets right")
    mcnemar_p_value: Fraction | None = Field(None, description="two-sided; below 0.05 the difference is unlikely to be chance")


class DetectableDifferences(_Strict):
    """The accuracy differences a classification task's test set can detect (evaluation.mdd), exact binomial
    tests at `alpha` (two-sided) with probability `power`."""

    test_examples: int = Field(ge=1, description="test examples scored (after max_eval_examples)")
    alpha: Fraction
    power: Fraction
    vs_majority: float | None = Field(None, description="smallest accuracy gain over the majority class's test "
                                      "accuracy that one model's score shows; null = none at this size")
    discordant_fraction: Fraction | None = Field(None, description="share of test examples exactly one of the "
                                                 "compared pretrained and random-init runs got right")
    paired: float | None = Field(None, description="smallest pretrained - random-init accuracy difference McNemar's "
                                 "test finds at that discordance; null = none (or no random-init run)")


class TaskResults(_Strict):
    task_type: Literal[TASK_TYPES]  # type: ignore[valid-type]
    primary_metric: str
    language: str
    data: TaskDataInfo
    pretrained: FinetuneScores
    random_init: FinetuneScores | None = None
    tfidf_logreg: BaselineScores | None = None
    majority: BaselineScores | None = None
    comparison: Comparison | None = Field(None, description="present when random_init is")
    mdd: DetectableDifferences | None = Field(None, description="classification: the minimal detectable "
                                              "differences at the test size (optional in v4, issue 18)")
    compared: dict[str, ComparedScores] | None = Field(
        None, description="label of each `evaluate.compare_checkpoints` entry -> its scores")
    settings: dict[str, Any] | None = Field(
        None, description="v4: the fine-tuning settings this task was evaluated with (evaluate.finetune with the "
                          "task's overrides, learning_rates as tried on the checkpoint); results.json's `config` is "
                          "the latest evaluation's, which may not have evaluated this task")

    @model_validator(mode="after")
    def _metrics_of_the_task_type(self) -> "TaskResults":
        allowed = set(TYPE_METRICS[self.task_type])
        if self.primary_metric not in allowed:
            raise ValueError(f"primary_metric {self.primary_metric!r} is not a {self.task_type} metric "
                             f"({', '.join(sorted(allowed))})")
        models = [(m, getattr(self, m)) for m in ("pretrained", "random_init", "tfidf_logreg", "majority")]
        models += [(f"compared.{label}", s) for label, s in (self.compared or {}).items()]
        for model, scores in models:
            if scores is None:
                continue
            parts = [("", scores), (".dev", scores.dev)]
            parts += [(f".runs.{i}.test", r.test) for i, r in enumerate(getattr(scores, "runs", []))]
            for where, values in parts:
                check_metrics(self.task_type, f"{model}{where}", values)
        return self


class FeatureRow(_Strict):
    option: str
    description: str
    layers: list[int] = Field(description="indices into (embeddings h0, layer 1, ..., layer L)")
    best_epoch: int = Field(ge=1)
    dev_entity_f1: Fraction
    entity_f1: Fraction | None = None
    entity_precision: Fraction | None = None
    entity_recall: Fraction | None = None
    mix_weights: list[Fraction] | None = Field(None, description="scalar mix: softmax weights per layer")
    mix_gamma: float | None = None


class FeatureBasedResults(_Strict):
    task: str
    seed: int
    layers_available: int = Field(ge=1, description="hidden states the encoder gives: embeddings + L layers")
    tagger: str
    rows: list[FeatureRow]


class TargetDataInfo(_Strict):
    source_path: str
    source_sha256: str
    lines: int = Field(ge=0)
    examples: int = Field(ge=1, description="target examples scored (at most finetune.max_eval_examples)")
    dropped: dict[str, int] = Field(description="examples the reader did not use, by reason")
    truncated: int = Field(ge=0, description="inputs cut by max_seq_len with the evaluated checkpoint's tokenizer")


class ZeroShotRun(_Strict):
    seed: int
    test: MetricValues


class ZeroShotScores(MetricValues):
    """One model's target metrics: mean and `<metric>_std` over the runs of the learning rate chosen on the
    source's dev split."""

    learning_rate: float = Field(gt=0.0)
    runs: list[ZeroShotRun]


class TransferTarget(_Strict):
    language: str
    data: TargetDataInfo
    pretrained: ZeroShotScores
    random_init: ZeroShotScores | None = None
    compared: dict[str, ZeroShotScores] | None = None


class CrosslingualResults(_Strict):
    """Zero-shot transfer from one task: its fine-tuned models scored unchanged on other languages' data."""

    task_type: Literal[TASK_TYPES]  # type: ignore[valid-type]
    primary_metric: str
    source_language: str
    targets: dict[str, TransferTarget]

    @model_validator(mode="after")
    def _metrics_of_the_task_type(self) -> "CrosslingualResults":
        for key, target in self.targets.items():
            models = [("pretrained", target.pretrained), ("random_init", target.random_init)]
            models += [(f"compared.{label}", s) for label, s in (target.compared or {}).items()]
            for model, scores in models:
                if scores is None:
                    continue
                check_metrics(self.task_type, f"targets.{key}.{model}", scores)
                for i, run in enumerate(scores.runs):
                    check_metrics(self.task_type, f"targets.{key}.{model}.runs.{i}.test", run.test)
        return self


class ObjectiveResults(BaseModel):
    """The checkpoint's pretraining objective on held-out shards (evaluation/heldout.py): `<name>_loss`,
    `<name>_acc`, `<name>_perplexity` per loss it reports (names vary by objective, hence extra keys allowed) and
    the no-context baselines."""

    model_config = ConfigDict(extra="allow")
    objective: str
    split: str
    batches: int = Field(ge=1)
    instances: int = Field(ge=1)
    unigram_token_loss: float = Field(ge=0.0)
    unigram_token_perplexity: float = Field(ge=1.0)
    headline: dict[str, Any] = Field(description="metric, value, baseline, baseline_name (and perplexities)")


class Results(_Strict):
    format: Literal["bertfactory.results"] = FORMAT
    schema_version: Literal[2, 3, 4, 5] = SCHEMA_VERSION
    created_by: str
    checkpoint: CheckpointInfo
    config: dict[str, Any] = Field(description="the `evaluate` recipe section of the latest evaluation (each task's "
                                   "own settings: tasks.<task>.settings)")
    intrinsic: IntrinsicResults | None = None
    objective: ObjectiveResults | None = Field(None, description="held-out score of the pretraining objective")
    tasks: dict[str, TaskResults]
    feature_based: FeatureBasedResults | None = Field(None, description="frozen-encoder tagger per layer combination")
    compared_checkpoints: dict[str, CheckpointInfo] | None = Field(
        None, description="label -> the other checkpoints fine-tuned beside ours (`tasks.<task>.compared.<label>`)")
    crosslingual: dict[str, CrosslingualResults] | None = Field(None, description="source task -> zero-shot transfer")
    timings: dict[str, float] = Field(description="wall-clock seconds per part (the only non-deterministic values)")

    @model_validator(mode="after")
    def _compared_labels_known(self) -> "Results":
        known = set(self.compared_checkpoints or {})
        used = [(f"tasks.{t}", set(r.compared or {})) for t, r in self.tasks.items()]
        used += [(f"crosslingual.{t}.targets.{k}", set(x.compared or {}))
                 for t, c in (self.crosslingual or {}).items() for k, x in c.targets.items()]
        for where, labels in used:
            if labels - known:
                raise ValueError(f"{where}.compared: {', '.join(sorted(labels - known))} not in compared_checkpoints")
        for task in self.crosslingual or {}:
            if task not in self.tasks:
                raise ValueError(f"crosslingual.{task}: not among the evaluated tasks")
        return self


def validate_results(data: Any, source: str = "results", strict: bool = False) -> Results:
    """`data` as Results, or a ContractError naming `source` and each offending key. `strict`: for data parsed from
    a file, no value is converted to the type its field wants (a hand-edited `"accuracy": "0.75"`, a `true` for
    a number, `1.0` for a count are refused, not read as 0.75, 1.0 and 1); the writer's own values are lax (a
    tuple, a numpy number)."""
    if not isinstance(data, dict):
        raise ContractError(f"{source}: results must be a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise ContractError(f"{source}: 'format' is {data.get('format')!r}, expected {FORMAT!r}")
    version = data.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise ContractError(f"{source}: results schema version {version!r} is not supported by this bertfactory "
                            f"(supported: {', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))})")
    try:
        if strict:  # JSON's types as the file has them (strict JSON mode reads an array as a tuple, NaN as NaN)
            return Results.model_validate_json(json.dumps(data), strict=True)
        return Results.model_validate(data)
    except ValidationError as err:
        problems = "\n".join(f"  - {'.'.join(map(str, e['loc']))}: {e['msg']}{_found(e)}" for e in err.errors())
        raise ContractError(f"{source} is not valid results (schema v{version}):\n{problems}") from None


def to_document(data: dict, source: str = "results") -> dict:
    """Validate `data` -> the dict exactly as results.json holds it (absent optional parts left out)."""
    return validate_results(data, source).model_dump(mode="json", exclude_none=True)


def write_results(path: str | Path, data: dict) -> dict:
    """Validate `data` and write it atomically as JSON (sorted keys). Returns the validated dict as written."""
    path = Path(path)
    doc = to_document(data, f"results to be written to {path}")
    atomic_write_json(path, doc)
    return doc


def read_results(path: str | Path) -> dict:
    """Read and validate a results.json (a file or the eval directory holding one) -> plain dict."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    data = read_json_file(path, f"no evaluation results at {path}; run `bertfactory evaluate` first")
    return validate_results(data, str(path), strict=True).model_dump(mode="json", exclude_none=True)


def _found(error: dict) -> str:
    """`, found <value>` for an error about a plain value (a wrong type, out of range), else ''."""
    value = error.get("input")
    if error.get("type") == "missing" or isinstance(value, (dict, list)):
        return ""
    text = json.dumps(value) if value is None or isinstance(value, (bool, int, float, str)) else repr(value)
    return f", found {text if len(text) <= 40 else text[:37] + '...'}"


def nsp_one_label_note(intrinsic: dict) -> str | None:
    """Why the NSP accuracy of `intrinsic` (results.json's part) is no two-way score, when its instances were all of
    one label, else None (both labels, no NSP score, or a file from before `nsp_label_counts`)."""
    counts = intrinsic.get("nsp_label_counts")
    if intrinsic.get("nsp_accuracy") is None or not counts or min(counts) > 0:
        return None
    present, absent = ("IsNext", "NotNext") if counts[0] else ("NotNext", "IsNext")
    why = ", as the held-out split has too few documents to draw one from another" if counts[0] else ""
    return f"over {max(counts):,} {present} pairs and no {absent} pair{why}: always answering {present} would score 1.0"
