"""The results.json contract (schema v1, documented in docs/results.md): pydantic models, the writer (validates,
then writes atomically) and the reader (checks format and schema version first, then validates every field).

    from evaluation.results import read_results
    results = read_results(run_dir / "eval" / "results.json")     # a plain dict, validated
    results["tasks"]["movie_sentiment"]["pretrained"]["accuracy"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bertfactory.errors import ContractError
from bertfactory.io import atomic_write_json, read_json_file

FORMAT = "bertfactory.results"
SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)
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
    nsp_accuracy: Fraction
    nsp_loss: float = Field(ge=0.0)
    chance_mlm_accuracy: Fraction
    unigram_mlm_accuracy: Fraction
    unigram_mlm_loss: float = Field(ge=0.0)


class TaskDataInfo(_Strict):
    source_path: str
    source_sha256: str
    lines: int = Field(ge=0)
    split_method: str
    sizes: dict[Literal["train", "dev", "test"], int]
    label_names: list[str]
    label_counts: dict[Literal["train", "dev", "test"], dict[str, int]]
    dropped: dict[str, int] = Field(description="examples not used, by reason (e.g. zero_valence)")


class EpochRecord(_Strict):
    epoch: int = Field(ge=1)
    train_loss: float = Field(ge=0.0)
    dev_accuracy: Fraction
    lr_end: float = Field(ge=0.0)


class FinetuneScores(_Strict):
    accuracy: float = Field(ge=0.0, le=1.0, description="test accuracy of the best-dev epoch")
    accuracy_ci95: tuple[Fraction, Fraction] | None = Field(None, description="Wilson 95 % interval of the test accuracy")
    f1: float | None = Field(None, ge=0.0, le=1.0, description="test F1 of the positive class (binary tasks)")
    dev_accuracy: Fraction
    best_epoch: int = Field(ge=1)
    steps: int = Field(ge=1)
    epochs: list[EpochRecord]


class MajorityScores(_Strict):
    label: int
    label_name: str
    accuracy: float = Field(ge=0.0, le=1.0, description="test accuracy of always predicting the train majority label")
    f1: float | None = Field(None, ge=0.0, le=1.0)
    dev_accuracy: Fraction


class Comparison(_Strict):
    """Pretrained vs random init on the same test examples (McNemar's test)."""

    accuracy_difference: float = Field(ge=-1.0, le=1.0, description="pretrained minus random_init test accuracy")
    pretrained_only_correct: int = Field(ge=0, description="test examples only the pretrained model gets right")
    random_init_only_correct: int = Field(ge=0, description="test examples only the random-init model gets right")
    mcnemar_p_value: Fraction = Field(description="two-sided; below 0.05 the difference is unlikely to be chance")


class TaskResults(_Strict):
    data: TaskDataInfo
    pretrained: FinetuneScores
    random_init: FinetuneScores | None = None
    majority: MajorityScores
    comparison: Comparison | None = Field(None, description="present when random_init is")


class Results(_Strict):
    format: Literal["bertfactory.results"] = FORMAT
    schema_version: Literal[1] = SCHEMA_VERSION
    created_by: str
    checkpoint: CheckpointInfo
    config: dict[str, Any] = Field(description="the `evaluate` recipe section used")
    intrinsic: IntrinsicResults | None = None
    tasks: dict[str, TaskResults]
    timings: dict[str, float] = Field(description="wall-clock seconds per part (the only non-deterministic values)")


def validate_results(data: Any, source: str = "results") -> Results:
    if not isinstance(data, dict):
        raise ContractError(f"{source}: results must be a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise ContractError(f"{source}: 'format' is {data.get('format')!r}, expected {FORMAT!r}")
    version = data.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise ContractError(f"{source}: results schema version {version!r} is not supported by this bertfactory "
                            f"(supported: {', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))})")
    try:
        return Results.model_validate(data)
    except ValidationError as err:
        problems = "\n".join(f"  - {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
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
    return validate_results(data, str(path)).model_dump(mode="json", exclude_none=True)
