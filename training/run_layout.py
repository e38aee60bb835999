"""Where the pretraining stage reads and writes inside a run directory (docs/run-directory.md):

    RUN/tokenizer/tokenizer.json, RUN/shards/          read
    RUN/pretrain/metrics.jsonl, checkpoints/step-N/, final/, summary.json, loss_curve.png   written

    paths = PretrainPaths(Path("runs/local"))
    paths.checkpoints, paths.final, paths.metrics
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file


@dataclass(frozen=True)
class PretrainPaths:
    run_dir: Path

    @property
    def tokenizer(self) -> Path:
        return self.run_dir / "tokenizer" / "tokenizer.json"

    @property
    def shards(self) -> Path:
        return self.run_dir / "shards"

    @property
    def out(self) -> Path:
        return self.run_dir / "pretrain"

    @property
    def checkpoints(self) -> Path:
        return self.out / "checkpoints"

    @property
    def final(self) -> Path:
        return self.out / "final"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.out / "summary.json"

    @property
    def loss_curve(self) -> Path:
        return self.out / "loss_curve.png"

    def tokenizer_sha256(self) -> str:
        """The sha256 of the run's tokenizer, which the shards and every checkpoint must have been made with."""
        if not self.tokenizer.is_file():
            raise ContractError(f"no tokenizer at {self.tokenizer}; run `bertfactory preprocess` on this run "
                                "directory first")
        return sha256_file(self.tokenizer)
