"""General distillation once per student, not once per (task, seed): the generally-distilled student is cached.

General distillation reads the pretraining shards, not the task, so every task (and, with `general_seed` pinned,
every task seed) of a study starts task distillation from the same generally-distilled student, as TinyBERT's
paper task-distils one general TinyBERT. The entries live in distillation/state_cache.py's StateCache (default
RUN/cache/distill-general/<method>-<key16>/; on object storage shared through the bucket): `state.pt` holds the
modules general distillation trained and later phases read (the student's encoder, TinyBERT's projections). The
key hashes every input that decides the result: the teacher's weights that the objective reads, the shards'
manifest, the student's initial weights, the objective's settings, steps, batch size, learning rate, the seed, the
device, the number of CPU threads (results depend on it, docs/results.md "Determinism") and the torch version.

The cache is outside RUN/distill on purpose: a changed distill config replaces that directory (moved aside,
flows/stamps.py), and the general students must outlive it.

    from distillation.general_cache import GeneralDistillation
    cache_dir, url = resolve_cache("cache/distill-general", run_dir, "general_cache")
    general = GeneralDistillation(StateCache(cache_dir, url), "tinybert", seed=1, device=torch.device("cpu"))
    record = general.run({"student": student.bert, "projections": projections}, {"teacher": teacher.model.bert},
                         shards_dir, settings, train=lambda: run_distillation(...))
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch import nn

from bertfactory.io import sha256_file

from .state_cache import StateCache, state_digest


class GeneralDistillation:
    """Runs one method's general distillation through `cache` (a StateCache; its cache_dir None: always trains)."""

    def __init__(self, cache: StateCache, method: str, seed: int, device: torch.device):
        self.cache, self.method, self.seed, self.device = cache, method, seed, device

    def key_document(self, trained: dict[str, nn.Module], teacher: dict[str, nn.Module], shards_dir: Path,
                     settings: dict) -> dict:
        return {"method": self.method, "teacher": state_digest(teacher),
                "shards_manifest": sha256_file(Path(shards_dir) / "manifest.json"),
                "initial_student": state_digest(trained), "settings": settings, "seed": self.seed,
                "device": self.device.type, "threads": torch.get_num_threads(), "torch": torch.__version__}

    def _train(self, train: Callable[[], list[dict]]) -> list[dict]:
        # the run draws dropout from its own seed and leaves the caller's random state as it found it, so a hit
        # and a miss are followed by the same computation
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed)
            return train()

    def run(self, trained: dict[str, nn.Module], teacher: dict[str, nn.Module], shards_dir: Path, settings: dict,
            train: Callable[[], list[dict]]) -> dict:
        """Train `trained` in place by `train()` (which returns its metrics records), or load it from the entry of
        the same key. -> {"key", "reused", "cache", "steps", "final_loss"} for results.json."""
        key_doc = self.key_document(trained, teacher, shards_dir, settings)
        record = self.cache.run(self.method, key_doc, trained, lambda: self._train(train),
                                f"{self.method} general distillation")
        return {**record, "steps": settings.get("steps")}
