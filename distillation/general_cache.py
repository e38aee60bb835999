"""General distillation once per student, not once per (task, seed): the generally-distilled student is cached.

General distillation reads the pretraining shards, not the task, so every task (and, with `general_seed` pinned,
every task seed) of a study starts task distillation from the same generally-distilled student, as TinyBERT's
paper task-distils one general TinyBERT. An entry, `<cache>/<method>-<key16>/`, holds `state.pt` (the states of
the modules general distillation trained and later phases read: the student's encoder, TinyBERT's projections),
`key.json` (what the key hashes) and `metrics.jsonl` (the loss lines of the run that made it). The key hashes
every input that decides the result: the teacher's weights that the objective reads, the shards' manifest, the
student's initial weights, the objective's settings, steps, batch size, learning rate, the seed, the device, the
number of CPU threads (results depend on it, docs/results.md "Determinism") and the torch version. A hit loads
the state and trains nothing; with a different input it misses. Entries are published whole (a staging
directory renamed into place), so a crash leaves no half entry; two runs that miss at once both train, and the
first rename wins (the results are byte-identical by determinism).

The cache is outside RUN/distill on purpose: a changed distill config replaces that directory (moved aside,
flows/stamps.py), and the general students must outlive it. On object storage the cache is a location of its own
(`resolve_cache`): relative to a run on a bucket it is the same path in the bucket, or any s3:// / gs:// URL, so
nodes that share no disk share the general students. A miss there trains, publishes the entry locally, then pushes
it with its `.complete` marker last (bertfactory.run_location); a lookup trusts an entry only with that marker and
pulls it into the local working copy; a local hit that the location lacks (its push failed) is pushed again.

    from distillation.general_cache import GeneralDistillation, resolve_cache
    cache_dir, url = resolve_cache("cache/distill-general", run_dir)
    general = GeneralDistillation(cache_dir, "tinybert", seed=1, device=torch.device("cpu"), url=url)
    record = general.run({"student": student.bert, "projections": projections}, {"teacher": teacher.model.bert},
                         shards_dir, settings, train=lambda: run_distillation(...))
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import shutil
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from bertfactory import storage
from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import AtomicFile, append_jsonl, atomic_write_json, canonical_json, sha256_file
from bertfactory.run_location import MARKER, WorkingCopy, remote_of, resolve_run_dir

logger = logging.getLogger(__name__)

KEY_FORMAT = 1


def state_digest(modules: dict[str, nn.Module]) -> str:
    """sha256 over every named parameter and buffer of `modules` (name, dtype, shape and bytes, in name order)."""
    digest = hashlib.sha256()
    for prefix in sorted(modules):
        state = modules[prefix].state_dict()
        for name in sorted(state):
            tensor = state[name].detach().to("cpu").contiguous()
            digest.update(f"{prefix}.{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def resolve_cache(setting: str | None, run_dir: Path) -> tuple[Path | None, str | None]:
    """`general_cache` -> (the local directory of the entries, the URL they are shared through or None).
    A URL is its own location; a relative path is resolved against the run directory, and for a run on object
    storage against its run location (so it is the same path in the bucket, and `..` may leave the run but not the
    bucket); an absolute path is local. None: no cache."""
    if setting is None:
        return None, None
    if storage.is_url(setting):
        url = storage.normalize(setting)
    else:
        run_url = remote_of(run_dir)
        if run_url is None or Path(setting).is_absolute():
            # normalised, so results.json names RUN/cache/..., not RUN/x/../cache/...
            return Path(os.path.normpath(Path(run_dir) / setting)), None
        scheme, rest = run_url.split("://", 1)
        joined = posixpath.normpath(posixpath.join(rest, setting))
        if joined.split("/", 1)[0] != rest.split("/", 1)[0] or joined in (".", ".."):
            raise ConfigError(f"general_cache {setting!r}: relative to the run location {run_url} it leaves the "
                              "bucket; give a URL (s3://BUCKET/PATH) instead")
        url = f"{scheme}://{joined}"
    return resolve_run_dir(url, "general distillation cache"), url


class GeneralDistillation:
    """Runs one method's general distillation through the cache (`cache_dir` None: no cache, always trains).
    `url`: the location the entries are shared through (`cache_dir` is then its working copy)."""

    def __init__(self, cache_dir: Path | None, method: str, seed: int, device: torch.device,
                 url: str | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.method, self.seed, self.device = method, seed, device
        self.shared = WorkingCopy(self.cache_dir, url) if url is not None and self.cache_dir is not None else None

    def key_document(self, trained: dict[str, nn.Module], teacher: dict[str, nn.Module], shards_dir: Path,
                     settings: dict) -> dict:
        return {"format": KEY_FORMAT, "method": self.method, "teacher": state_digest(teacher),
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
        key = hashlib.sha256(canonical_json(key_doc).encode()).hexdigest()
        record = {"key": key[:16], "steps": settings.get("steps"), "cache": None, "reused": False}
        if self.cache_dir is None:
            records = self._train(train)
            return {**record, "final_loss": records[-1].get("loss") if records else None}
        entry = self.cache_dir / f"{self.method}-{key[:16]}"
        record["cache"] = self.shared.remote(entry.name) if self.shared is not None else str(entry)
        shared = self.shared is not None and storage.exists(self.shared.remote(f"{entry.name}/{MARKER}"))
        if shared and not (entry / "state.pt").is_file():
            # state.pt is the last of the entry's files in pull order: with it here, the rest is here too
            self.shared.pull_tree(entry.name)
            logger.info("%s general distillation: pulled %s", self.method, self.shared.remote(entry.name))
        if (entry / "state.pt").is_file():
            final_loss = self._load(entry, key_doc, trained)
            if self.shared is not None and not shared:  # trained here, but its push never finished
                self._share(entry)
            return {**record, "reused": True, "final_loss": final_loss}
        records = self._train(train)
        final_loss = records[-1].get("loss") if records else None
        self._publish(entry, key_doc, trained, records, final_loss)
        logger.info("%s general distillation: cached in %s (key %s)", self.method, entry, key[:16])
        if self.shared is not None:
            self._share(entry)
        return {**record, "final_loss": final_loss}

    def _share(self, entry: Path) -> None:
        """Push the entry, its `.complete` marker last: another machine trusts it only then."""
        self.shared.publish_dir(entry.name)
        logger.info("%s general distillation: shared as %s", self.method, self.shared.remote(entry.name))

    def _load(self, entry: Path, key_doc: dict, trained: dict[str, nn.Module]) -> float | None:
        stored = json.loads((entry / "key.json").read_text(encoding="utf-8"))
        if stored.get("key") != key_doc:
            raise ContractError(f"{entry / 'key.json'}: the entry's inputs are not the ones its name hashes (edited "
                                "or truncated name?); delete the entry to train it again")
        state = torch.load(entry / "state.pt", map_location="cpu", weights_only=True)
        for name, module in trained.items():
            module.load_state_dict(state[name])
        logger.info("%s general distillation: reused %s (same teacher, shards, initial student, settings, seed, "
                    "threads), %s steps not trained again", self.method, entry, key_doc["settings"].get("steps"))
        return stored.get("final_loss")

    def _publish(self, entry: Path, key_doc: dict, trained: dict[str, nn.Module], records: list[dict],
                 final_loss: float | None) -> None:
        staging = entry.with_name(f".{entry.name}.staging-{os.getpid()}")
        if entry.exists() and not (entry / "state.pt").is_file():  # not an entry this module published
            shutil.rmtree(entry)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        with AtomicFile(staging / "state.pt") as tmp:
            torch.save({name: {k: v.detach().to("cpu") for k, v in module.state_dict().items()}
                        for name, module in trained.items()}, tmp)
        append_jsonl(staging / "metrics.jsonl", records)
        atomic_write_json(staging / "key.json", {"key": key_doc, "final_loss": final_loss})
        try:
            os.replace(staging, entry)
        except OSError:  # another run published the same key first: its state is the same
            shutil.rmtree(staging, ignore_errors=True)
