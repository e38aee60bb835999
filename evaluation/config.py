"""Config section `evaluate` (EvaluateConfig): which checkpoint to evaluate, the intrinsic evaluation on the
held-out shards, and the fine-tuning recipe shared by every downstream task.

Defaults follow the GLUE fine-tuning recipe of Devlin et al. 2019 (batch 32, 3 epochs, lr from the grid
{5e-5, 4e-5, 3e-5, 2e-5} — the default picks 2e-5 —, AdamW with weight decay 0.01, linear warmup over 10 % of
the steps then linear decay, dropout 0.1 on the pooled [CLS] vector, sequences up to 128 tokens).
configs/local.yaml overrides them for a tiny model on a 2-core CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from bertfactory.config import StrictModel


class IntrinsicConfig(StrictModel):
    """Masked-LM and next-sentence accuracy of the pretrained model on the held-out shards."""

    enabled: bool = Field(True, description="run the intrinsic evaluation")
    split: str = Field("heldout", description="shard split to evaluate on (never the training split in a report)")
    mask_variant: int = Field(0, ge=0, description="which of the shards' precomputed mask variants to score")
    batch_size: int = Field(64, ge=1, description="instances per forward pass")
    max_batches: int | None = Field(None, ge=1, description="stop after this many batches (null = the whole split)")


class FinetuneConfig(StrictModel):
    """The fine-tuning recipe used for every task and for every model compared (pretrained and random init)."""

    epochs: int = Field(3, ge=1, description="passes over the task's training split; the epoch with the best dev accuracy is kept")
    learning_rate: float = Field(2e-5, gt=0.0, description="peak AdamW learning rate (BERT's GLUE grid: 5e-5, 4e-5, 3e-5, 2e-5)")
    batch_size: int = Field(32, ge=1, description="examples per optimiser step")
    max_seq_len: int = Field(128, ge=3, description="tokens per example including [CLS] and [SEP]; longer texts are truncated")
    warmup_ratio: float = Field(0.1, ge=0.0, le=1.0, description="fraction of all steps spent warming the lr up linearly from 0")
    weight_decay: float = Field(0.01, ge=0.0, description="AdamW decoupled weight decay (not on biases and LayerNorm weights)")
    classifier_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on the pooled [CLS] vector before the classifier")
    max_grad_norm: float = Field(1.0, gt=0.0, description="clip the global gradient norm to this value")
    eval_batch_size: int = Field(128, ge=1, description="examples per forward pass when scoring dev/test")
    max_train_examples: int | None = Field(None, ge=1, description="use only the first N training examples (null = all)")
    seed: int = Field(12345, description="seed of the classifier init, a random-init encoder, dropout and data order")


class MovieSentimentConfig(StrictModel):
    """Binary sentiment of movie-review sentences (Pang & Lee snippets with human valence, Hutto & Gilbert 2014)."""

    enabled: bool = Field(True, description="run this task")
    input: str = Field("sample:movie_reviews", description="`id<TAB>valence<TAB>text` file; `sample:movie_reviews` = the cached sample")


class TasksConfig(StrictModel):
    """The downstream tasks, each fine-tuned with `evaluate.finetune`."""

    movie_sentiment: MovieSentimentConfig = Field(default_factory=MovieSentimentConfig, description="binary movie-review sentiment")


class EvaluateConfig(StrictModel):
    """What to evaluate and how."""

    checkpoint: str = Field("pretrain/final", description="model directory to evaluate; relative paths are inside the run directory")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available, else cpu")
    num_threads: int | None = Field(None, ge=1, description="CPU threads for torch (null = torch's default)")
    random_init_baseline: bool = Field(True, description="also fine-tune the same architecture from random weights with the same budget")
    intrinsic: IntrinsicConfig = Field(default_factory=IntrinsicConfig, description="held-out masked-LM / NSP accuracy")
    finetune: FinetuneConfig = Field(default_factory=FinetuneConfig, description="fine-tuning recipe for every task")
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="downstream tasks")

    def checkpoint_path(self, run_dir: Path) -> Path:
        """The model directory to evaluate: `checkpoint`, relative paths taken inside `run_dir`."""
        path = Path(self.checkpoint).expanduser()
        return path if path.is_absolute() else Path(run_dir) / path
